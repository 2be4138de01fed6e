"""Memory as a limit of a job's compiles, in parts: the memory watch on real processes, the unit each compiler
process works on, the OOM verdict from its evidence, the retry's fewer compilers, and the host's memory where
a cgroup limits it. The builds that put them together: tests/buildspecs/test_memory_limits.py (heavy)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from wfbuild import hostinfo
from wfbuild.compiling import memwatch, oom
from wfbuild.compiling.memwatch import Proc
from wfbuild.runner import compile_memory

# A stand-in compiler: Python under a compiler's name (the kernel's comm is the name it was run by), holding
# MiB of memory until told to stop.
HOG = "import sys, time; b = bytearray(int(sys.argv[1]) << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(30)"


def _fake_compiler(tmp: Path, name: str) -> Path:
    path = tmp / name
    path.symlink_to(sys.executable)
    return path


def test_the_watch_records_each_marked_compilers_peak_and_the_most_at_once(tmp_path: Path) -> None:
    watch = memwatch.MemoryWatch(interval=0.05)
    cc1plus, cicc = _fake_compiler(tmp_path, "cc1plus"), _fake_compiler(tmp_path, "cicc")
    marked = {**os.environ, **watch.marker("build-cell")}
    procs = [
        subprocess.Popen([str(cc1plus), "-c", HOG, "160", "src/big.cpp"], env=marked),
        subprocess.Popen([str(cicc), "-c", HOG, "60", "--orig_src_file_name", "/w/cells/c1/csrc/k.cu"], env=marked),
        subprocess.Popen([str(cc1plus), "-c", HOG, "300", "other.cpp"]),  # another job's: not marked
    ]
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            watch.sample()
            report = watch.report("build-cell")
            if report and report["compilers_at_once"] == 2 and report["peak_unit_mib"] >= 160:
                break
            time.sleep(0.05)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    report = watch.report("build-cell")
    assert report is not None, "the marked compilers were seen"
    units = {u["unit"]: u for u in report["units"]}
    assert set(units) == {"src/big.cpp", "csrc/k.cu"}, units  # other.cpp carries no marker: another job's
    assert units["src/big.cpp"]["tool"] == "cc1plus" and 160 <= units["src/big.cpp"]["peak_mib"] < 200
    assert units["csrc/k.cu"]["tool"] == "cicc" and 60 <= units["csrc/k.cu"]["peak_mib"] < 100
    assert (report["unit"], report["compilers_at_once"]) == ("src/big.cpp", 2)
    assert report["compilers_mib_at_once"] >= 220
    assert watch.report("build-other") is None


@pytest.mark.parametrize(
    ("argv", "tool", "parent", "unit"),
    [
        (["cicc", "--orig_src_file_name", "/w/cells/c/csrc/a.cu", "-arch", "compute_90"], "cicc", [], "csrc/a.cu"),
        (["ptxas", "-arch=sm_90", "/tmp/tmpxft_00001162_00000000-6_k.ptx", "-o", "x.cubin"], "ptxas", [], "k.cu"),
        (
            ["cc1plus", "-quiet", "-I", "inc", "/w/src/torch/aten/x.cpp", "-dumpbase", "x.cpp"],
            "cc1plus",
            [],
            "aten/x.cpp",
        ),
        (["ld", "-shared", "-o", "/w/build/lib/_C.so", "a.o"], "ld", [], "link _C.so"),
        (["cc1plus", "-E", "/tmp/tmpxft_0000_00000000-2.cpp"], "cc1plus", ["g++", "-c", "/w/cells/c/m.cpp"], "m.cpp"),
    ],
)
def test_the_unit_of_a_compiler_process(argv: list[str], tool: str, parent: list[str], unit: str) -> None:
    assert memwatch.shown(memwatch.unit_of(argv, tool, "", parent)) == unit


def _procs() -> dict[int, Proc]:
    return {
        41: Proc("build-c", "csrc/bwd.cu", "cicc", "", peak_kib=3_000_000),
        42: Proc("build-c", "csrc/fwd.cu", "cicc", "", peak_kib=1_000_000),
        43: Proc("build-c", "csrc/api.cpp", "cc1plus", "", peak_kib=700_000),
    }


REPORT = {"compilers_at_once": 3, "compilers_mib_at_once": 4600}
GCC = "c++: fatal error: Killed signal terminated program cc1plus"
NVCC = "nvcc error   : 'cicc' died due to signal 9 (Kill signal)"


def test_a_kernel_kill_of_one_of_the_stages_compilers_is_an_oom_naming_its_unit() -> None:
    kills = [oom.Kill(999, "python3", 50), oom.Kill(41, "cicc", 3100)]  # another process's kill is not ours
    found = oom.diagnose(["ninja: build stopped"], _procs(), REPORT, kills, 0, 6000)
    assert found is not None and (found.unit, found.tool, found.peak_mib) == ("csrc/bwd.cu", "cicc", 3100)
    assert "kernel's OOM killer ended cicc (pid 41" in found.how and found.at_once == 3


@pytest.mark.parametrize(
    ("tail", "kills", "delta", "budget", "unit"),
    [
        ([NVCC], [oom.Kill(77, "cicc", 2900)], 0, 60_000, "csrc/bwd.cu"),  # killed before the watch saw its pid
        ([NVCC], [], 1, 60_000, "csrc/bwd.cu"),  # the cgroup's oom_kill counter rose
        ([GCC], [], 0, 5000, "csrc/api.cpp"),  # no kernel evidence: the compilers held 4600 of 5000 MiB
        ([NVCC], [], 0, 60_000, None),  # a kill by signal with memory to spare: not memory's doing
        (["error: expected ';' before '}' token"], [oom.Kill(41, "python3", 10)], 1, 5000, None),  # no kill line
    ],
)
def test_the_verdict_weighs_the_evidence(
    tail: list[str], kills: list[oom.Kill], delta: int, budget: float, unit: str | None
) -> None:
    found = oom.diagnose(tail, _procs(), REPORT, kills, delta, budget)
    assert (found.unit if found else None) == unit


def test_kernel_log_records_and_compiler_messages_parse() -> None:
    line = (
        "Memory cgroup out of memory: Killed process 4242 (cc1plus) total-vm:1103644kB, anon-rss:923456kB, "
        "file-rss:13240kB, shmem-rss:0kB, UID:0 pgtables:2048kB oom_score_adj:500"
    )
    found = oom.KILL.search(line)
    assert found is not None and (found["pid"], found["comm"], found["anon"]) == ("4242", "cc1plus", "923456")
    assert oom.KILL.search("Out of memory: Killed process 17 (cicc) total-vm:9kB, anon-rss:8kB, file-rss:0kB")
    assert oom.killed_tool([GCC, "compilation terminated."]) == "cc1plus"
    assert oom.killed_tool([NVCC]) == "cicc"
    assert oom.killed_tool(["ninja: build stopped: subcommand failed.", "error: exit status 137"]) == ""
    assert oom.killed_tool(["error: exit status 1"]) is None


class _Job:
    """What CompileMemory reads of the runner's Job."""

    def __init__(self, retry_instance: dict[str, Any] | None = None) -> None:
        self.job = {"env": {"WF_RESERVE_GIB": "0"}, "retry_instance": retry_instance}
        self.written: list[str] = []
        self.log = self
        self.threads: list[Any] = []

    def write(self, line: str) -> None:
        self.written.append(line)


def test_a_retry_halves_the_compilers_or_fits_them_to_the_units_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostinfo, "memory_gib", lambda: 8.0)
    job = _Job()
    memory = compile_memory.CompileMemory(job)  # type: ignore[arg-type]
    found = oom.Oom("csrc/bwd.cu", "cicc", 3000, "the kernel's OOM killer ended cicc", 4, 8000)
    extra = {"MAX_JOBS": "4", "WF_NVCC_THREADS": "2", "WF_CELLS_AT_ONCE": "1", "WF_NVCC_THREADS_POOLED": "1"}
    retry = memory.retry("build-c", "c", found, extra)
    # 8 GiB hold two compilers at the unit's 3000 MiB (with headroom), fewer than half of 8
    assert retry is not None and (retry["MAX_JOBS"], retry["WF_NVCC_THREADS"]) == ("2", "1")
    assert retry["WF_NVCC_THREADS_POOLED"] == "0"
    (line,) = job.written
    assert line.startswith("OUT OF MEMORY: cell c: csrc/bwd.cu (cicc) was killed at 3000 MiB on a 8.0 GiB instance")
    assert "(8.0 GiB for the cell's compilers, 8 at once)" in line and "with 2 compiler(s) at once, not 8" in line
    assert line.index("not 8") < 300, "what the farm does is within what the CLI shows of a cause line"
    small = memory.retry("build-c", "c", found, {"MAX_JOBS": "2", "WF_CELLS_AT_ONCE": "1"})
    assert small is not None and small["MAX_JOBS"] == "1"


def test_at_one_compiler_the_farm_moves_to_the_larger_instance_or_says_there_is_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hostinfo, "memory_gib", lambda: 32.0)
    found = oom.Oom("csrc/bwd.cu", "cicc", 31000, "the kernel's OOM killer ended cicc", 1, 31000)
    bigger = _Job({"type": "c7i.8xlarge", "memory_gib": 64.0})
    assert compile_memory.CompileMemory(bigger).retry("b", "c", found, {"MAX_JOBS": "1"}) is None  # type: ignore[arg-type]
    assert "the farm relaunches the job on a c7i.8xlarge (64 GiB) with what it learned here" in bigger.written[-1]
    largest = _Job(None)
    assert compile_memory.CompileMemory(largest).retry("b", "c", found, {"MAX_JOBS": "1"}) is None  # type: ignore[arg-type]
    assert "no larger instance is planned for this job" in largest.written[-1]


def test_the_hosts_memory_is_its_cgroups_limit_where_that_is_lower(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    v1 = tmp_path / "memory" / "jobs" / "a"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (v1 / "memory.stat").write_text("cache 1\nhierarchical_memory_limit 3221225472\n")
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    listing = tmp_path / "cgroup"
    listing.write_text("9:cpu:/\n4:memory:/jobs/a\n0::/\n")
    monkeypatch.setattr(hostinfo, "CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(hostinfo, "SELF_CGROUP", listing)
    assert hostinfo.cgroup_limit_bytes() == 3 << 30 and hostinfo.oom_kills() == 2
    assert hostinfo.memory_gib() == pytest.approx(3.0)
    v2 = tmp_path / "jobs" / "b"
    v2.mkdir(parents=True)
    (tmp_path / "jobs" / "memory.max").write_text(str(5 << 30))  # a parent's limit binds the child
    (v2 / "memory.max").write_text("max\n")
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    listing.write_text("0::/jobs/b\n")
    assert hostinfo.cgroup_limit_bytes() == 5 << 30 and hostinfo.oom_kills() == 1
