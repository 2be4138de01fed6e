"""A memory cgroup for a test's runner: the kernel enforces an instance's memory, its OOM killer included.

Created under this process's own memory cgroup (v1 or v2), limited to ``limit`` bytes (None: measured
only), its processes started through ``argv`` (a shell that moves itself in, then execs), removed at the end
(any process of ours still in it is killed first). Needs the right to create a cgroup (root here).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from pathlib import Path
from types import TracebackType

import pytest

from wfbuild import hostinfo

_names = itertools.count()


class MemoryCgroup:
    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self.folder = Path()
        self.version = 0

    def __enter__(self) -> MemoryCgroup:
        found = hostinfo.cgroup_dir()
        if found is None:
            pytest.skip("no memory cgroup of this process to create a child in")
        parent, self.version = found
        self.folder = parent / f"wf-test-{os.getpid()}-{next(_names)}"
        try:
            self.folder.mkdir()
            if self.limit is not None:
                name = "memory.limit_in_bytes" if self.version == 1 else "memory.max"
                (self.folder / name).write_text(str(self.limit))
                if self.version == 2 and (self.folder / "memory.swap.max").exists():
                    (self.folder / "memory.swap.max").write_text("0")
                if self.version == 1 and (self.folder / "memory.memsw.limit_in_bytes").exists():
                    (self.folder / "memory.memsw.limit_in_bytes").write_text(str(self.limit))
        except OSError as exc:
            pytest.skip(f"cannot create a limited memory cgroup here ({exc}): these tests need root")
        return self

    def argv(self, argv: list[str]) -> list[str]:
        """``argv`` started inside the cgroup (the shell moves itself in, then becomes ``argv``)."""
        return ["sh", "-c", f'echo $$ > "{self.folder}/cgroup.procs" && exec "$@"', "sh", *argv]

    def rss_bytes(self) -> int:
        """Anonymous memory the cgroup's processes hold now (what the OOM killer frees; not the page cache)."""
        keys = ("total_rss", "total_rss_huge") if self.version == 1 else ("anon",)
        try:
            lines = (self.folder / "memory.stat").read_text().splitlines()
        except OSError:
            return 0
        return sum(int(v) for k, v in (line.split() for line in lines) if k in keys)

    def pids(self) -> list[str]:
        """The processes in the cgroup now: all the runner started, sccache's detached server's included."""
        try:
            return (self.folder / "cgroup.procs").read_text().split()
        except OSError:
            return []

    def oom_kills(self) -> int:
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        for line in (self.folder / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pids = [int(p) for p in (self.folder / "cgroup.procs").read_text().split()]
            if not pids:
                break
            for pid in pids:  # ours: started by this test (a compiler cache server, say)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        self.folder.rmdir()
