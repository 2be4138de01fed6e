"""Running stage processes: output captured into build.log (and echoed), abortable from a thread."""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any


class BuildLog:
    """build.log, also streamed to stdout (the SSM agent and CodeBuild keep stdout)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[str] = path.open("a", encoding="utf-8", errors="replace")
        self._lock = threading.Lock()
        self.tail: collections.deque[str] = collections.deque(maxlen=400)

    def write(self, line: str) -> None:
        line = line.rstrip("\n")
        with self._lock:
            if not self._file.closed:  # after the upload only stdout still listens
                self._file.write(line + "\n")
                self._file.flush()
            self.tail.append(line)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def note(self, message: str) -> None:
        self.write(f"[wfbuild {time.strftime('%H:%M:%S')}] {message}")

    def tail_text(self, lines: int = 200, limit: int = 8000) -> str:
        with self._lock:
            text = "\n".join(list(self.tail)[-lines:])
        return text[-limit:]

    def close(self) -> None:
        with self._lock:
            self._file.close()


class Runner:
    """Runs processes (several at once for extension cells); ``abort`` (from any thread) stops them all."""

    def __init__(self, log: BuildLog) -> None:
        self.log = log
        self._procs: set[subprocess.Popen[str]] = set()
        self._lock = threading.Lock()
        self.aborted: str | None = None
        self.on_abort: list[Any] = []  # extra callables, e.g. 'docker kill <container>'

    def abort(self, reason: str) -> None:
        with self._lock:
            if self.aborted is None:
                self.aborted = reason
            procs = list(self._procs)
        self.log.note(f"aborting: {reason}")
        for hook in list(self.on_abort):
            hook()
        for proc in procs:
            self._stop(proc)

    @staticmethod
    def _stop(proc: subprocess.Popen[str]) -> None:
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the stage's own process group, started below
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

    def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        tail: collections.deque[str] | None = None,
        prefix: str = "",
    ) -> int:
        """Run ``argv`` to completion, every output line into the log; returns the exit status."""
        with self._lock:
            if self.aborted:
                return 130
            try:
                proc = subprocess.Popen(
                    list(argv),
                    env=dict(env),
                    cwd=cwd,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    text=True,
                    errors="replace",
                    start_new_session=True,
                )
            except OSError as exc:
                self.log.write(f"cannot start {argv[0]}: {exc}")
                if tail is not None:
                    tail.append(f"cannot start {argv[0]}: {exc}")
                return 127
            self._procs.add(proc)
        assert proc.stdout is not None
        for line in proc.stdout:
            self.log.write(prefix + line)
            if tail is not None:
                tail.append(line.rstrip("\n"))
        code = proc.wait()
        with self._lock:
            self._procs.discard(proc)
        return code
