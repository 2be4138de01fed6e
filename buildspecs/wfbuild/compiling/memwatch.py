"""The memory a job's compilers hold: each translation unit's peak resident memory, and the most at once.

A thread of the runner reads /proc every quarter second. A compile stage's environment carries
``WF_MEMWATCH=<job token>:<stage>`` (every process of the stage inherits it, a builder container's too, and
the compiler cache's server passes its client's environment to the compilers it runs), so the compilers of
each stage are told apart from other jobs' and from each other on a shared host. For each compiler process
(cicc, ptxas, cc1plus, cudafe++, the linker, ...) it keeps the kernel's high-water mark of its resident
memory (VmHWM: the peak, whenever it was reached between two reads) and the unit it compiles; per stage the
most compilers and the most of their resident memory at one moment. What it reports is the runner's own
reading of the kernel's figures, so a build cannot misstate it.

The unit of a process: nvcc hands cicc and cudafe++ the ``.cu`` file (``--orig_src_file_name``); its other
steps (the host compiler, ptxas) name nvcc's intermediate files after it (``tmpxft_<pid>_..._<stem>.ptx``);
under the compiler cache they run in one folder per ``.cu`` file (``sccache_nvcc*``), named by the cicc
that ran there; gcc's cc1plus takes the source itself; a linker, its output.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MARK = "WF_MEMWATCH"
COMPILERS = frozenset(
    {"cicc", "ptxas", "cc1plus", "cc1", "cudafe++", "nvlink", "fatbinary", "lto1", "ld", "ld.bfd", "ld.gold"}
)
SOURCES = (".cu", ".cpp", ".cc", ".cxx", ".c", ".c++", ".C")
TMPXFT = re.compile(r"tmpxft_[0-9a-f]+_[0-9a-f]+-\d+_(?P<stem>[^/]+?)\.(cudafe1\.|compute_\d+|sm_\d+|ptx|cpp\d|fatbin)")
INTERMEDIATE = ("tmpxft_", "x_", "testfile.")  # nvcc's and the compiler cache's own files, not a unit
VALUED = frozenset({"-o", "-MF", "-MT", "-MQ", "-include", "-imacros", "-dumpbase", "-dumpdir", "-auxbase", "-I"})
KIB = 1024


@dataclass
class Proc:
    """One compiler process of a stage: its unit and tool, its peak and current resident memory (KiB)."""

    stage: str
    unit: str
    tool: str
    cwd: str
    peak_kib: int = 0
    rss_kib: int = 0
    alive: bool = True


@dataclass
class StageMemory:
    procs: dict[tuple[int, str], Proc] = field(default_factory=dict)  # (pid, start time) -> process
    most_at_once: int = 0
    most_kib_at_once: int = 0


def unit_of(argv: Sequence[str], tool: str, cwd: str = "", parent: Sequence[str] = ()) -> str:
    """The source file (or a linker's output) ``argv`` works on, "" when it does not say."""
    for i, arg in enumerate(argv[:-1]):
        if arg == "--orig_src_file_name":
            return argv[i + 1]
    for arg in argv:
        if arg.startswith("--orig_src_file_name="):
            return arg.split("=", 1)[1]
    if tool in ("ld", "ld.bfd", "ld.gold", "nvlink"):
        out = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-o"), "")
        return f"link {os.path.basename(out)}" if out else ""
    for arg in argv[1:]:
        found = TMPXFT.search(arg)
        if found:  # nvcc's intermediate files carry the .cu file's stem
            return found.group("stem") + ".cu"
    source = _source_arg(argv[1:])
    if source and not os.path.basename(source).startswith(INTERMEDIATE):
        return source
    return _source_arg(parent[1:]) if parent else ""


def _source_arg(args: Sequence[str]) -> str:
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in VALUED:
            skip = True
            continue
        if not arg.startswith("-") and arg.endswith(SOURCES):
            return arg
    return ""


def shown(unit: str) -> str:
    """A unit as the log names it: relative to its cell's copy of the source (``<work>/cells/<cell>/``) or to
    the job's checkout (``<work>/src/<package>/``), else its file name."""
    for folder in ("/cells/", "/src/"):
        if folder in unit:
            rest = unit.split(folder, 1)[1]
            return rest.split("/", 1)[1] if "/" in rest else rest
    return os.path.basename(unit) if unit.startswith("/") else unit


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


class MemoryWatch(threading.Thread):
    """The job's compilers' memory, per compile stage; ``stopped.set()`` ends it."""

    def __init__(self, interval: float = 0.25, proc: str = "/proc") -> None:
        super().__init__(daemon=True, name="memwatch")
        self.interval, self.proc = interval, proc
        self.token = secrets.token_hex(6)
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._stages: dict[str, StageMemory] = {}
        self._ignored: set[tuple[int, str]] = set()
        self._keep_dirs: dict[str, str] = {}  # a compiler cache's per-file folder -> its unit

    def marker(self, stage: str) -> dict[str, str]:
        return {MARK: f"{self.token}:{stage}"}

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        """One read of /proc (the thread calls it; a test may too)."""
        try:
            pids = [int(p) for p in os.listdir(self.proc) if p.isdigit()]
        except OSError:
            return
        live: set[tuple[int, str]] = set()
        with self._lock:
            for pid in pids:
                key = self._key(pid)
                if key is None or key in self._ignored:
                    continue
                proc = self._find(key)
                if proc is None:
                    proc = self._track(key)
                    if proc is None:
                        self._ignored.add(key)
                        continue
                status = _read(f"{self.proc}/{pid}/status")
                if status is None:
                    continue
                peak, rss = _status_kib(status)
                proc.peak_kib, proc.rss_kib = max(proc.peak_kib, peak, rss), rss
                live.add(key)
            for memory in self._stages.values():
                running = [p for k, p in memory.procs.items() if k in live]
                for key, p in memory.procs.items():
                    p.alive = key in live
                memory.most_at_once = max(memory.most_at_once, len(running))
                memory.most_kib_at_once = max(memory.most_kib_at_once, sum(p.rss_kib for p in running))

    def _key(self, pid: int) -> tuple[int, str] | None:
        stat = _read(f"{self.proc}/{pid}/stat")
        if stat is None:
            return None
        text = stat.decode("utf-8", "replace")
        fields = text[text.rfind(")") + 2 :].split()
        return (pid, fields[19]) if len(fields) > 19 else None  # field 22: the start time

    def _find(self, key: tuple[int, str]) -> Proc | None:
        for memory in self._stages.values():
            if key in memory.procs:
                return memory.procs[key]
        return None

    def _track(self, key: tuple[int, str]) -> Proc | None:
        pid = key[0]
        comm = (_read(f"{self.proc}/{pid}/comm") or b"").decode("utf-8", "replace").strip()
        if comm not in COMPILERS:
            return None
        environ = _read(f"{self.proc}/{pid}/environ") or b""
        wanted = f"{MARK}={self.token}:".encode()
        stage = next((e[len(wanted) :].decode() for e in environ.split(b"\0") if e.startswith(wanted)), None)
        if stage is None:
            return None
        argv = [a.decode("utf-8", "replace") for a in (_read(f"{self.proc}/{pid}/cmdline") or b"").split(b"\0") if a]
        try:
            cwd = os.readlink(f"{self.proc}/{pid}/cwd")
        except OSError:
            cwd = ""
        parent: list[str] = []
        stat = (_read(f"{self.proc}/{pid}/stat") or b"").decode("utf-8", "replace")
        ppid = stat[stat.rfind(")") + 2 :].split()[1:2]
        if ppid:
            raw = _read(f"{self.proc}/{ppid[0]}/cmdline") or b""
            parent = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
        unit = unit_of(argv, comm, cwd, parent)
        if unit and os.path.basename(cwd).startswith("sccache_nvcc") and comm in ("cicc", "cudafe++"):
            self._keep_dirs[cwd] = unit
        if not unit or os.path.basename(unit).startswith(INTERMEDIATE):
            # a step the compiler cache runs in (or on files of) the .cu file's own folder
            dirs = [cwd, *(os.path.dirname(a) for a in argv[1:] if a.startswith("/"))]
            unit = next((self._keep_dirs[d] for d in dirs if d in self._keep_dirs), "")
        proc = Proc(stage, shown(unit) if unit else f"({comm})", comm, cwd)
        self._stages.setdefault(stage, StageMemory()).procs[key] = proc
        return proc

    def procs(self, stage: str) -> list[Proc]:
        with self._lock:
            memory = self._stages.get(stage)
            return [Proc(**vars(p)) for p in memory.procs.values()] if memory else []

    def pids(self, stage: str) -> dict[int, Proc]:
        with self._lock:
            memory = self._stages.get(stage)
            return {pid: p for (pid, _), p in memory.procs.items()} if memory else {}

    def report(self, stage: str) -> dict[str, Any] | None:
        """What the manifest keeps of a stage: its units' peaks (largest first, ten of them), the most
        compilers and the most of their memory at once; None when no compiler of it was seen."""
        with self._lock:
            memory = self._stages.get(stage)
            if memory is None or not memory.procs:
                return None
            per_unit: dict[str, tuple[int, str]] = {}
            for p in memory.procs.values():
                if p.peak_kib > per_unit.get(p.unit, (-1, ""))[0]:
                    per_unit[p.unit] = (p.peak_kib, p.tool)
            at_once, kib_at_once = memory.most_at_once, memory.most_kib_at_once
        # "(cc1plus)": a process that names no unit (the compiler cache's and nvcc's probes): counted at once,
        # not listed as a unit, unless nothing else was seen
        ranked = sorted(per_unit.items(), key=lambda item: -item[1][0])
        ranked = [r for r in ranked if not r[0].startswith("(")] or ranked
        units = [{"unit": u, "tool": t, "peak_mib": round(k / KIB)} for u, (k, t) in ranked[:10]]
        return {
            "peak_unit_mib": units[0]["peak_mib"],
            "unit": units[0]["unit"],
            "tool": units[0]["tool"],
            "units": units,
            "units_seen": len(ranked),
            "compilers_at_once": at_once,
            "compilers_mib_at_once": round(kib_at_once / KIB),
        }


def _status_kib(status: bytes) -> tuple[int, int]:
    """(VmHWM, VmRSS) in KiB from /proc/PID/status."""
    peak = rss = 0
    for line in status.split(b"\n"):
        if line.startswith(b"VmHWM:"):
            peak = int(line.split()[1])
        elif line.startswith(b"VmRSS:"):
            rss = int(line.split()[1])
    return peak, rss
