"""Ninja-off setuptools builds compile their translation units in parallel (wfbuild.compiling.parallel_compile).

The build test runs the real stage script (build-library.sh) on a torch ``BuildExtension(use_ninja=False)``
package of four units, once with MAX_JOBS=1 and once with MAX_JOBS=3, with logging compiler wrappers
first on PATH: the wrappers' own start/end lines show how many compilers ran at once, and the two
wheels must be the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
from pathlib import Path

import pytest

from tests.buildspecs.conftest import BUNDLE, run, tool_env
from tests.buildspecs.jobs import ROOT
from wfbuild.compiling import parallel_compile, parallel_compile_tool

FIXTURE = ROOT / "tests" / "fixtures" / "multi_tu_ext"
COMPILERS = ("cc", "c++", "gcc", "g++", "x86_64-linux-gnu-gcc", "x86_64-linux-gnu-g++")


def _logging_wrappers(folder: Path, log: Path, path: str) -> None:
    """cc, c++, gcc, g++ that note when each process starts and ends, then run the real compiler."""
    folder.mkdir()
    for name in COMPILERS:
        real = next((Path(d) / name for d in path.split(os.pathsep) if (Path(d) / name).is_file()), None)
        if real is None:
            continue
        script = folder / name
        script.write_text(
            f'#!/bin/sh\necho "start $$ $(date +%s.%N)" >> "{log}"\n"{real}" "$@"\nrc=$?\n'
            f'echo "end $$ $(date +%s.%N)" >> "{log}"\nexit $rc\n'
        )
        script.chmod(script.stat().st_mode | stat.S_IXUSR)


def most_at_once(log: Path) -> tuple[int, int]:
    """(compiler processes, the most running at one moment) from the wrappers' log."""
    events = []
    for line in log.read_text().splitlines():
        kind, _pid, when = line.split()
        events.append((float(when), 1 if kind == "start" else -1))
    running = peak = 0
    for _when, delta in sorted(events, key=lambda e: (e[0], e[1])):  # an end before a start at the same instant
        running += delta
        peak = max(peak, running)
    return sum(1 for _w, d in events if d == 1), peak


def _build(tmp: Path, build_env: Path, cache_dir: Path, jobs: int) -> tuple[bytes, int, int, str]:
    work = tmp / f"jobs{jobs}"
    work.mkdir()
    log = work / "compilers.log"
    env = tool_env(cache_dir)
    _logging_wrappers(work / "wrappers", log, env["PATH"])
    env["PATH"] = os.pathsep.join([str(work / "wrappers"), env["PATH"]])
    env |= {
        "WF_SRC_DIR": str(FIXTURE),
        "WF_ENV_DIR": str(build_env),
        "WF_OUT_DIR": str(work / "out"),
        "WF_VERSION_SCHEME": "git",
        "WF_BUILD_COPY": str(tmp / "copy"),  # the same folder for both builds: the same paths in the objects
        "SOURCE_DATE_EPOCH": "1700000000",
        "MAX_JOBS": str(jobs),
    }
    proc = run(["bash", str(BUNDLE / "stages" / "build-library.sh")], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (work / "out").glob("*.whl")
    processes, peak = most_at_once(log)
    return wheel.read_bytes(), processes, peak, proc.stdout + proc.stderr


@pytest.mark.heavy  # two real builds against torch
def test_ninja_off_units_compile_at_once_and_the_wheel_is_the_serial_ones(
    tmp_path: Path, build_env: Path, cache_dir: Path
) -> None:
    serial, processes, peak, _ = _build(tmp_path, build_env, cache_dir, 1)
    assert processes >= 5 and peak == 1  # 4 units and the link, one after another
    parallel, processes, peak, out = _build(tmp_path, build_env, cache_dir, 3)
    assert processes >= 5 and peak >= 2, f"the compilers never overlapped ({peak} at most)"
    assert "up to 3 translation units at a time (wfbuild.compiling.parallel_compile" in out  # the log says how
    assert "4 translation unit(s) in 1 compile step(s), at most 3 compilers at once" in out
    assert hashlib.sha256(parallel).hexdigest() == hashlib.sha256(serial).hexdigest()


class _Errors:
    class CompileError(Exception):
        pass


class _Compiler:
    """torch's ninja-off _compile, in miniature: it swaps the shared ``compiler_so`` per file kind and puts
    it back afterwards. In threads a .cu file's nvcc would reach a .cpp file; in forked children it cannot."""

    compiler_so = "g++"

    def _setup_compile(self) -> None:  # patch() wraps classes that have it
        pass

    def compile(self, sources: list[str], out: Path) -> list[str]:
        objects = [str(out / (Path(s).name + ".o")) for s in sources]
        for obj, src in zip(objects, sources, strict=True):
            self._compile(obj, src, Path(src).suffix, [], [], [])
        return objects

    def _compile(self, obj: str, src: str, ext: str, *_: object) -> None:
        if src.startswith("bad"):
            raise _Errors.CompileError(f"{src}: syntax error")
        saved = self.compiler_so
        try:
            self.compiler_so = "nvcc" if ext == ".cu" else saved
            import time

            time.sleep(0.05)  # long enough for the other units to start meanwhile
            flags = os.environ.get("NVCC_APPEND_FLAGS", "-")  # what an nvcc started here would read
            Path(obj).write_text(f"{self.compiler_so} {os.getpid()}\n{flags}")
        finally:
            self.compiler_so = saved


def _patched(monkeypatch: pytest.MonkeyPatch, jobs: int) -> type[_Compiler]:
    cls = type("Compiler", (_Compiler,), {"compile": _Compiler.compile})
    cls.__module__ = "fake_distutils.ccompiler"
    module = type(sys)("fake_distutils.ccompiler")
    module.Compiler = cls  # type: ignore[attr-defined]
    module.CompileError = _Errors.CompileError  # type: ignore[attr-defined]
    monkeypatch.setenv("WF_COMPILE_JOBS", str(jobs))
    monkeypatch.delenv("WF_PARALLEL_LOG", raising=False)
    parallel_compile.patch(module)
    return cls


def test_each_unit_gets_its_own_compiler_in_a_child_of_its_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cls = _patched(monkeypatch, 3)
    sources = ["a.cu", "b.cpp", "c.cu", "d.cpp", "e.cpp"]
    objects = cls().compile(sources, tmp_path)
    seen = [Path(o).read_text().split() for o in objects]
    assert [s[0] for s in seen] == ["nvcc", "g++", "nvcc", "g++", "g++"]
    assert len({s[1] for s in seen} | {str(os.getpid())}) == 6  # five children, none of them this process
    assert cls.compiler_so == "g++" and "_compile" not in vars(cls())


def test_a_failed_unit_fails_the_compile_naming_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cls = _patched(monkeypatch, 2)
    with pytest.raises(_Errors.CompileError, match=r"1 translation unit\(s\) failed to compile: bad\.cpp"):
        cls().compile(["a.cpp", "bad.cpp", "c.cpp"], tmp_path)


def test_one_job_leaves_the_serial_loop_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cls = _patched(monkeypatch, 1)
    objects = cls().compile(["a.cpp", "b.cpp"], tmp_path)
    assert {Path(o).read_text().split()[1] for o in objects} == {str(os.getpid())}


def _flags_seen(objects: list[str]) -> list[str]:
    return [Path(o).read_text().split("\n")[1] for o in objects]


RUNNER = "-Xcompiler=-ffile-prefix-map=/w=. -objtemp"  # what the runner exports beside WF_NVCC_THREADS_ALONE


@pytest.mark.parametrize(
    ("jobs", "sources", "expected"),
    [
        # torch-scatter's _segment_csr_cuda: one .cu beside two .cpp, so its nvcc runs alone: every thread
        (
            2,
            ["segment_csr.cpp", "cpu/segment_csr_cpu.cpp", "cuda/segment_csr_cuda.cu"],
            [RUNNER, RUNNER, f"{RUNNER} --threads 4"],
        ),
        (3, ["a.cu", "b.cu", "c.cpp"], [f"{RUNNER} --threads 2"] * 2 + [RUNNER]),  # two nvcc at once: 2 each
        (2, ["a.cu", "b.cu", "c.cu"], [f"{RUNNER} --threads 2"] * 3),  # two at a time
        # 4 // 5: one, said on the command line, after any --threads of the package's own flags
        (8, ["a.cu", "b.cu", "c.cu", "d.cu", "e.cu"], [f"{RUNNER} --threads 1"] * 5),
        (1, ["a.cpp", "b.cu"], [RUNNER, RUNNER]),  # one job: the serial loop as it was, the runner's flags
        (4, ["only_cuda.cu"], [f"{RUNNER} --threads 4"]),  # a step of one unit compiles in this process
    ],
)
def test_a_steps_cuda_units_share_the_threads_of_one_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, jobs: int, sources: list[str], expected: list[str]
) -> None:
    cls = _patched(monkeypatch, jobs)
    monkeypatch.setenv("WF_NVCC_THREADS_ALONE", "4")
    monkeypatch.setenv("NVCC_APPEND_FLAGS", RUNNER)
    assert _flags_seen(cls().compile(sources, tmp_path)) == expected
    assert os.environ["NVCC_APPEND_FLAGS"] == RUNNER  # put back in the build's own process


def test_under_the_compiler_caches_pool_every_cuda_unit_gets_the_threads_of_one_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The runner says the cache server runs the compilers (its pool holds them to the cores): two nvcc at
    once each ask for all 4; the pool, not the split, keeps them within the cores (test_nvcc_pool.py)."""
    cls = _patched(monkeypatch, 3)
    monkeypatch.setenv("WF_NVCC_THREADS_ALONE", "4")
    monkeypatch.setenv("WF_NVCC_THREADS_POOLED", "1")
    monkeypatch.setenv("NVCC_APPEND_FLAGS", RUNNER)
    assert _flags_seen(cls().compile(["a.cu", "b.cu", "c.cpp"], tmp_path)) == [f"{RUNNER} --threads 4"] * 2 + [RUNNER]
    monkeypatch.setenv("WF_NVCC_THREADS_POOLED", "0")  # its server did not start (wfbuild.compiling.compiler_cache)
    assert _flags_seen(cls().compile(["a.cu", "b.cu", "c.cpp"], tmp_path)) == [f"{RUNNER} --threads 2"] * 2 + [RUNNER]


def test_the_runners_threads_stay_where_it_exports_no_threads_for_one_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cls = _patched(monkeypatch, 2)
    monkeypatch.delenv("WF_NVCC_THREADS_ALONE", raising=False)
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "--threads 2")
    assert _flags_seen(cls().compile(["a.cpp", "b.cu"], tmp_path)) == ["--threads 2", "--threads 2"]
    monkeypatch.setenv("WF_NVCC_THREADS_ALONE", "1")  # a package's own --threads (wfbuild.compiling.parallelism)
    assert _flags_seen(cls().compile(["a.cpp", "b.cu"], tmp_path)) == ["--threads 2", "--threads 2"]


@pytest.mark.parametrize(
    ("flags", "threads", "expected"),
    [
        ("-objtemp --threads 2", 4, "-objtemp --threads 4"),
        ("--threads=2 -objtemp", 3, "-objtemp --threads 3"),
        # 1 too: the last --threads on nvcc's command line wins over a package's own (causal-conv1d's 4)
        ("-Xcompiler=-ffile-prefix-map=/w=. --threads 2", 1, "-Xcompiler=-ffile-prefix-map=/w=. --threads 1"),
        ("", 2, "--threads 2"),
        ("-Xnvlink=--threads-unused", 2, "-Xnvlink=--threads-unused --threads 2"),  # only the whole flag
    ],
)
def test_with_threads_replaces_only_the_threads_flag(flags: str, threads: int, expected: str) -> None:
    assert parallel_compile.with_threads(flags, threads) == expected


@pytest.mark.parametrize(
    ("pyproject", "expected"),
    [
        ('[build-system]\nbuild-backend = "mesonpy"\n', "mesonpy"),
        ("[build-system]\nbuild-backend = 'scikit_build_core.build'\n", "scikit_build_core"),
        ('[build-system]\nbuild-backend = "setuptools.build_meta:__legacy__"\n', "setuptools"),
        ('[build-system]\nrequires = ["setuptools"]\n', "setuptools"),
        (None, "setuptools"),
    ],
)
def test_backend_names_the_build_system(tmp_path: Path, pyproject: str | None, expected: str) -> None:
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    assert parallel_compile_tool.backend(str(tmp_path)) == expected


def test_the_summary_names_the_cuda_units_threads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cls = _patched(monkeypatch, 2)
    monkeypatch.setenv("WF_PARALLEL_LOG", str(tmp_path / "parallel.jsonl"))
    monkeypatch.setenv("WF_NVCC_THREADS_ALONE", "2")
    cls().compile(["scatter.cpp", "scatter_cpu.cpp"], tmp_path)  # the _cpu extension: no CUDA unit
    assert parallel_compile_tool.summary(str(tmp_path / "parallel.jsonl")).endswith("at most 2 compilers at once")
    cls().compile(["scatter.cpp", "scatter_cpu.cpp", "scatter_cuda.cu"], tmp_path)
    line = parallel_compile_tool.summary(str(tmp_path / "parallel.jsonl"))
    assert (
        line
        == "5 translation unit(s) in 2 compile step(s), at most 2 compilers at once, nvcc --threads 2 for CUDA units"
    )
