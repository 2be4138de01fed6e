"""Extensions that share no object file build side by side (wfbuild.compiling.parallel_compile's build_ext loop),
within one bound on compilers for all of them, and give the serial build's bytes.

The build test runs setup.py of tests/fixtures/multi_ext (plain setuptools, three C extensions; two of
them compile the same one.c to the same one.o, with and without a macro) with the hook as a build
environment loads it, once with WF_COMPILE_JOBS=1 and once with 2, through compiler wrappers that note
each compile's start and end and hold it a moment, so that what overlaps is there to see.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.buildspecs.jobs import ROOT
from tests.buildspecs.test_parallel_compile import most_at_once
from wfbuild.compiling import parallel_compile, parallel_compile_tool

FIXTURE = ROOT / "tests" / "fixtures" / "multi_ext"
HOLD = 0.4  # seconds each compile is held: long beside the fork and the pipe, short for the test
# With WF_TEST_MEET set, a compile also holds (up to 30 s) until another has started, and one.c until a two*
# unit has: what may overlap then does on any host, however late a forked child gets a core. It never waits on
# a slot a waiting compile holds: 2 slots, 3 units ready (one.c, two.c, two_more.c), so another always starts.
MEET = (
    'if [ -n "$WF_TEST_MEET" ]; then i=0; while [ $i -lt 300 ]; do '
    '[ "$(grep -c "^start " "{log}")" -ge 2 ] && {{ [ "$src" != one.c ] || grep -q "^start two" "{log}"; }} && break; '
    "sleep 0.1; i=$((i + 1)); done; fi\n"
)


def _wrappers(folder: Path, log: Path, path: str) -> None:
    """cc and gcc that log each compile (``-c``) with its source's name, then run the real compiler."""
    folder.mkdir()
    for name in ("cc", "gcc", "x86_64-linux-gnu-gcc"):
        real = shutil.which(name, path=path)
        if real is None:
            continue
        (folder / name).write_text(
            "#!/bin/sh\n"
            'case " $* " in *" -c "*) ;; *) exec "' + real + '" "$@" ;; esac\n'
            'src=""; for a in "$@"; do case "$a" in *.c) src="${a##*/}" ;; esac; done\n'
            f'echo "start $src $(date +%s.%N)" >> "{log}"\nsleep {HOLD}\n{MEET.format(log=log)}"{real}" "$@"\nrc=$?\n'
            f'echo "end $src $(date +%s.%N)" >> "{log}"\nexit $rc\n'
        )
        (folder / name).chmod(0o755)


def _intervals(log: Path) -> list[tuple[str, float, float]]:
    starts: dict[str, list[float]] = {}
    out = []
    for line in log.read_text().splitlines():
        kind, src, when = line.split()
        if kind == "start":
            starts.setdefault(src, []).append(float(when))
        else:
            out.append((src, starts[src].pop(0), float(when)))
    return out


def _build(tmp: Path, jobs: int, fixture: Path = FIXTURE, **extra: str) -> dict[str, Any]:
    src = tmp / "src"  # the same folder every time: the same paths in the objects
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(fixture, src)
    log, record = tmp / f"compiles-{jobs}.log", tmp / f"parallel-{jobs}.jsonl"
    folder = tmp / f"wrappers-{jobs}"
    _wrappers(folder, log, os.environ["PATH"])
    env = (
        os.environ
        | {
            "PATH": os.pathsep.join([str(folder), os.environ["PATH"]]),
            "WF_COMPILE_JOBS": str(jobs),
            "WF_PARALLEL_LOG": str(record),
            "SOURCE_DATE_EPOCH": "1700000000",
        }
        | extra
    )
    env.pop("CC", None)
    hook = (  # what the build environment's .pth line does, then setup.py as pip runs it
        f"import runpy, sys; sys.path.insert(0, {str(ROOT / 'buildspecs')!r}); "
        "from wfbuild.compiling import parallel_compile; parallel_compile.install_hook(); "
        "sys.argv = ['setup.py', 'build_ext', '--build-lib', 'out']; runpy.run_path('setup.py', run_name='__main__')"
    )
    proc = subprocess.run([sys.executable, "-c", hook], cwd=src, env=env, capture_output=True, text=True, timeout=300)
    libs = {p.name.split(".")[0]: p.read_bytes() for p in (src / "out" / "wf_multi_ext").glob("*.so")}
    kinds = ""
    if proc.returncode == 0:
        probe = "from wf_multi_ext import _one_plain, _one_full, _two; print(_one_plain.kind(), _one_full.kind(), _two.twice(21))"
        kinds = subprocess.run(
            [sys.executable, "-c", probe], cwd=src / "out", capture_output=True, text=True, check=True
        ).stdout.strip()
    return {"proc": proc, "libs": libs, "kinds": kinds, "compiles": _intervals(log) if log.exists() else [],
            "log": log, "summary": parallel_compile_tool.summary(str(record))}  # fmt: skip


def test_extensions_that_share_no_object_build_side_by_side_in_one_bound_and_give_the_serial_bytes(
    tmp_path: Path,
) -> None:
    serial = _build(tmp_path, 1)
    assert serial["proc"].returncode == 0, serial["proc"].stderr[-3000:]
    assert most_at_once(serial["log"]) == (5, 1)  # (compiles, the most at one moment)
    side = _build(tmp_path, 2, WF_TEST_MEET="1")
    assert side["proc"].returncode == 0, side["proc"].stderr[-3000:]
    compiles = side["compiles"]
    assert sorted(c[0] for c in compiles) == ["full.c", "one.c", "one.c", "two.c", "two_more.c"]
    # The chains ran at the same time: a two* unit began before _one_plain's one.c (alone in its step) ended,
    # which the serial loop never does. On any host: either _two took the slots first, or one.c holds (MEET)
    # until a two* began; one.c, begun while those still ran, then overlapped one.
    first_one = min((c for c in compiles if c[0] == "one.c"), key=lambda c: c[1])
    assert min(c[1] for c in compiles if c[0].startswith("two")) < first_one[2], compiles
    # three were ready at the start (one.c, two.c, two_more.c): the shared slots let two run (MEET holds the first
    # until the second began, so they overlap on any host), never more
    assert most_at_once(side["log"]) == (5, 2), compiles
    # _one_plain and _one_full compile one.c to the same one.o: one after the other, each with its macro
    assert serial["kinds"] == side["kinds"] == "plain full 42"
    assert "3 extensions in 2 chains side by side, up to 2 compilers at once" in side["proc"].stderr
    assert side["summary"].endswith("3 extensions in 2 chains side by side, up to 2 compilers at once")
    assert serial["summary"].startswith("no compile step")
    assert sorted(side["libs"]) == ["_one_full", "_one_plain", "_two"]
    for name, data in serial["libs"].items():
        assert hashlib.sha256(side["libs"][name]).hexdigest() == hashlib.sha256(data).hexdigest(), name


def test_chains_off_keeps_setuptools_serial_loop(tmp_path: Path) -> None:
    result = _build(tmp_path, 2, WF_EXTENSION_CHAINS="off")
    assert result["proc"].returncode == 0, result["proc"].stderr[-3000:]
    compiles = sorted(result["compiles"], key=lambda c: c[1])
    # extension by extension: _one_plain's one.c, then _one_full's two units, then _two's
    assert [c[0] for c in compiles[:1]] + sorted(c[0] for c in compiles[1:3]) == ["one.c", "full.c", "one.c"]
    assert compiles[0][2] <= min(c[1] for c in compiles[1:]), compiles
    assert max(c[2] for c in compiles[:3]) <= min(c[1] for c in compiles if c[0].startswith("two")), compiles
    assert "chains side by side" not in result["summary"]
    assert result["kinds"] == "plain full 42"


def test_a_failed_chain_fails_the_build_naming_its_extensions(tmp_path: Path) -> None:
    broken = tmp_path / "fixture"
    shutil.copytree(FIXTURE, broken)
    (broken / "csrc" / "two_more.c").write_text("long wf_twice(long value) { return 2 * value }\n")
    (tmp_path / "build").mkdir()
    result = _build(tmp_path / "build", 2, broken)
    assert result["proc"].returncode != 0
    assert "1 chain(s) of extensions failed to compile: wf_multi_ext._two" in result["proc"].stderr
    assert "two_more.c:1:45: error: expected" in result["proc"].stderr  # the compiler's own line says why


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        ([["a.o"], ["a.o", "b.o"], ["c.o", "d.o"], ["d.o"], ["e.o"]], [[0, 1], [2, 3], [4]]),
        ([["a.o"], ["b.o"], ["b.o", "./a.o"]], [[0, 1, 2]]),  # joined through a third, one path spelled two ways
        ([["a.o"], ["b.o"]], [[0], [1]]),
        ([], []),
    ],
)
def test_chains_group_extensions_that_share_an_object(objects: list[list[str]], expected: list[list[int]]) -> None:
    assert parallel_compile.chains(objects) == expected


class _Compiler:
    @staticmethod
    def object_filenames(sources: list[str], output_dir: str) -> list[str]:
        return [f"{output_dir}/{Path(s).with_suffix('.o')}" for s in sources]


def _command(**extra: Any) -> Any:
    from setuptools.command.build_ext import build_ext  # type: ignore[import-untyped]

    exts = [SimpleNamespace(name=n, sources=[f"{n}.c"]) for n in ("a", "b")]
    cls = type("Cmd", (build_ext,), extra.pop("methods", {}))
    command: Any = object.__new__(cls)  # no distribution: only the attributes _independent reads
    command.__dict__.update({"extensions": exts, "compiler": _Compiler(), "build_temp": "t", "parallel": None} | extra)
    return command


def test_side_by_side_only_where_it_is_known_safe() -> None:
    assert [[e.name for e in chain] for chain in parallel_compile._independent(_command()) or []] == [["a"], ["b"]]
    assert parallel_compile._independent(_command(use_ninja=True)) is None  # one build.ninja for all
    assert parallel_compile._independent(_command(parallel=2)) is None  # the user's own --parallel
    own = {"build_extension": lambda self, ext: None}  # a package's own (CMake in build_temp, ...)
    assert parallel_compile._independent(_command(methods=own)) is None
    swig = _command()
    swig.extensions[0].sources = ["a.i"]
    assert parallel_compile._independent(swig) is None
    one = _command()
    one.extensions[1].sources = ["a.c"]  # both compile a.o: one chain, nothing side by side
    assert parallel_compile._independent(one) is None


def test_a_step_waiting_for_a_slot_sleeps(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """While other chains hold every slot, a compile step waits on the pipe, not in a busy loop (which would
    take a core from the very compilers it waits for)."""
    slots = parallel_compile.Slots(1)
    monkeypatch.setattr(parallel_compile, "_SLOTS", slots)
    assert slots.take()  # another chain's compiler holds the only slot
    done = tmp_path / "done"
    worker = threading.Thread(
        target=parallel_compile.run_forked, args=([(done, "a.c")], lambda path, _: path.touch(), 2, RuntimeError)
    )
    attempts: list[tuple[float, float]] = []  # (monotonic, the waiting thread's own CPU-s) at each failed try
    take = slots.take

    def counted() -> bool:
        got = take()
        if not got:
            attempts.append((time.monotonic(), time.thread_time()))  # in the waiting thread: its CPU alone
        return got

    monkeypatch.setattr(slots, "take", counted)
    worker.start()
    time.sleep(1.0)
    assert not done.exists() and worker.is_alive()
    slots.give()  # that compiler ends
    worker.join(timeout=10)
    assert done.exists() and not worker.is_alive()
    assert len(attempts) >= 2, attempts
    # the rule, not the host's speed: each try comes after a wait on the pipe (Slots.wait: 0.05 s), and the
    # waiting thread's own CPU time (nothing else's) stays far below a busy loop's second per second
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(attempts)]
    assert min(gaps) >= 0.04, f"a try for a slot {min(gaps):.3f} s after the last: a busy loop"
    waited = attempts[-1][1] - attempts[0][1]
    spent = attempts[-1][0] - attempts[0][0]
    assert waited < 0.25 * spent, f"{waited:.2f} CPU-s spent waiting {spent:.1f} s for a slot"
    slots.close()
