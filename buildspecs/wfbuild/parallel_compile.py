"""Translation units of a setuptools build compiled in parallel, without editing the package.

Setuptools compiles one file at a time: ``CCompiler.compile`` calls ``_compile`` for each object in
turn, and ``build_ext --parallel`` only runs *extensions* side by side (a ThreadPoolExecutor over
``self.extensions``), which does nothing for the common one-Extension-many-sources layout (the PyG
packages). torch's ``BuildExtension(use_ninja=False)`` keeps that loop and swaps its own ``_compile``
in, which sets ``compiler_so`` on the shared compiler object for each ``.cu`` file and puts it back
afterwards: running those calls in threads would let one file's nvcc leak into another's compile.

So ``compile`` is wrapped: the original runs with ``_compile`` recording its calls instead of
compiling (whatever ``_compile`` is: the platform's, or torch's wrapper), then each recorded call
runs in a forked child, up to ``WF_COMPILE_JOBS`` at once. A child owns a copy of the compiler
object, so torch's swap stays in it. Objects land where the serial build puts them and are linked
in the same order: the same bytes. A failed unit fails the build after the running ones finish.

The hook is installed into a build environment (``python -m wfbuild.parallel_compile install
--python ENV/bin/python``) as a ``.pth`` line that imports this file's copy; it does nothing unless
``WF_COMPILE_JOBS`` > 1, and patches distutils only when a build imports it. Each parallel
``compile`` appends one JSON line to ``WF_PARALLEL_LOG`` (units, jobs, peak children, seconds).
``python -m wfbuild.parallel_compile backend --src DIR`` names the source's build backend.

A compile step knows how many of its units are CUDA files, which the runner, counting a whole tree's
``.cu`` files, does not: the PyG packages build one extension per ``.cu`` file, one extension after
another, so one nvcc runs at a time however many the tree holds. Where the runner exports
``WF_NVCC_THREADS_ALONE`` (the nvcc threads its cell's cores and memory give one ``.cu`` file compiling
alone: wfbuild.parallelism), each ``.cu`` unit's nvcc gets that many threads shared by the step's ``.cu``
units that run at once (``unit_threads``), through its own copy of NVCC_APPEND_FLAGS. The thread count
never changes the bytes (tests/buildspecs/test_nvcc_threads.py).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

HOOK = "_wf_parallel_compile"  # the module's name inside a build environment
SUFFIXES = ("distutils.ccompiler", "distutils.compilers.C.base")  # setuptools' own, older ones, the stdlib's
CUDA_FILES = (".cu", ".cuh")  # what torch.utils.cpp_extension compiles with nvcc (_is_cuda_file)
_THREADS = re.compile(r"(?:^|\s)--threads[= ]\d+(?=\s|$)")  # the runner's own (wfbuild.parallelism)
_LOCK = threading.Lock()


def jobs() -> int:
    try:
        return max(1, int(os.environ.get("WF_COMPILE_JOBS") or 1))
    except ValueError:
        return 1


def unit_threads(sources: list[str], limit: int) -> int:
    """nvcc threads for each CUDA unit of a compile step of ``sources``, ``limit`` units at a time: the
    threads of one alone, shared by the CUDA units that run at once; 0 leaves NVCC_APPEND_FLAGS as set."""
    try:
        alone = int(os.environ.get("WF_NVCC_THREADS_ALONE") or 0)
    except ValueError:
        return 0
    cuda = sum(1 for source in sources if source.endswith(CUDA_FILES))
    return max(1, alone // min(limit, cuda)) if alone > 1 and cuda else 0


def with_threads(flags: str, threads: int) -> str:
    """``flags`` (NVCC_APPEND_FLAGS) with the runner's ``--threads`` replaced by ``threads`` (none for 1)."""
    kept = _THREADS.sub("", flags).strip()
    return f"{kept} --threads {threads}".strip() if threads > 1 else kept


@contextlib.contextmanager
def _nvcc_flags(threads: int) -> Iterator[None]:
    """NVCC_APPEND_FLAGS with ``threads`` meanwhile (0: untouched); put back after (the build's own process)."""
    if not threads:
        yield
        return
    before = os.environ.get("NVCC_APPEND_FLAGS")
    os.environ["NVCC_APPEND_FLAGS"] = with_threads(before or "", threads)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("NVCC_APPEND_FLAGS", None)
        else:
            os.environ["NVCC_APPEND_FLAGS"] = before


def _nvcc_threads(compile_one: Any, threads: int) -> Any:
    """``compile_one`` whose CUDA units run nvcc with ``threads``."""

    def one(*call: Any) -> Any:
        with _nvcc_flags(threads if str(call[1]).endswith(CUDA_FILES) else 0):
            return compile_one(*call)

    return one


def run_forked(calls: list[tuple[Any, ...]], compile_one: Any, limit: int, error: type[Exception]) -> int:
    """Run ``compile_one(*call)`` for every call, each in a forked child, ``limit`` at a time; the peak
    number of children. Raises ``error`` naming the sources that failed (their compiler said why)."""
    pending, peak = list(calls), 0
    running: dict[int, tuple[Any, ...]] = {}
    failed: list[str] = []
    while pending or running:
        while pending and len(running) < limit and not failed:
            call = pending.pop(0)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # the child: one unit, then out without running the parent's atexit hooks
                code = 1
                try:
                    compile_one(*call)
                    code = 0
                except BaseException as exc:
                    print(f"wfbuild.parallel_compile: {call[1]}: {exc}", file=sys.stderr)
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            running[pid] = call
            peak = max(peak, len(running))
        for pid in list(running):  # our own children only: never another thread's subprocess
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                call = running.pop(pid)
                if os.waitstatus_to_exitcode(status) != 0:
                    failed.append(str(call[1]))
                    pending.clear()  # the running units finish; no new one starts
        if running:
            time.sleep(0.02)
    if failed:
        raise error(f"{len(failed)} translation unit(s) failed to compile: {', '.join(failed)}")
    return peak


def _record(entry: dict[str, Any]) -> None:
    path = os.environ.get("WF_PARALLEL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")


def _wrap(original: Any, error: type[Exception]) -> Any:
    def compile(self: Any, sources: Any, *args: Any, **kwargs: Any) -> Any:
        limit = jobs()
        if limit <= 1:  # the serial loop, untouched (the hook is installed only for more jobs)
            return original(self, sources, *args, **kwargs)
        if len(sources) <= 1:  # one unit, compiled here: a CUDA one alone
            with _nvcc_flags(unit_threads([str(source) for source in sources], 1)):
                return original(self, sources, *args, **kwargs)
        with _LOCK:  # build_ext --parallel threads share one compiler object: one recording at a time
            queued: list[tuple[Any, ...]] = []
            own = "_compile" in self.__dict__  # torch's wrapper is an instance attribute
            compile_one = self._compile
            self._compile = lambda *call: queued.append(call)
            try:
                objects = original(self, sources, *args, **kwargs)
            finally:
                if own:
                    self._compile = compile_one
                else:
                    del self._compile
        started = time.monotonic()
        threads = unit_threads([str(call[1]) for call in queued], limit)
        one = _nvcc_threads(compile_one, threads)
        if len(queued) <= 1:
            for call in queued:
                one(*call)
            return objects
        peak = run_forked(queued, one, limit, error)
        seconds = round(time.monotonic() - started, 2)
        _record({"units": len(queued), "jobs": limit, "peak": peak, "seconds": seconds, "nvcc_threads": threads})
        cuda = f", nvcc --threads {threads} for its CUDA unit(s)" if threads else ""
        print(
            f"wfbuild.parallel_compile: {len(queued)} units, up to {limit} at a time{cuda}, {seconds}s", file=sys.stderr
        )
        return objects

    compile.__wf_parallel__ = True  # type: ignore[attr-defined]
    return compile


def patch(module: Any) -> None:
    """Wrap ``compile`` of the compiler base class this module defines (CCompiler, or Compiler)."""
    error = getattr(module, "CompileError", RuntimeError)
    for value in list(vars(module).values()):
        if not isinstance(value, type) or value.__module__ != module.__name__:
            continue
        original = vars(value).get("compile")
        if original is not None and hasattr(value, "_setup_compile") and not hasattr(original, "__wf_parallel__"):
            setattr(value, "compile", _wrap(original, error))  # noqa: B010  (a class we do not type)


class _Finder(importlib.abc.MetaPathFinder):
    """Patches the compiler module right after the build imports it (nothing else is touched)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if not name.endswith(SUFFIXES):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def patched(module: Any) -> None:
            exec_module(module)
            patch(module)

        loader.exec_module = patched  # type: ignore[union-attr,method-assign]
        return spec


def install_hook() -> None:
    """What the .pth line calls at every start of the environment's Python."""
    if jobs() > 1 and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
        for name, module in list(sys.modules.items()):  # imported before us (rare): patch now
            if name.endswith(SUFFIXES) and module is not None:
                patch(module)


def install(python: str) -> str:
    """Copy this file into the environment's site-packages with a .pth line that imports it."""
    probe = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    shutil.copyfile(__file__, os.path.join(site, f"{HOOK}.py"))
    with open(os.path.join(site, f"{HOOK}.pth"), "w", encoding="utf-8") as handle:
        handle.write(f"import {HOOK}; {HOOK}.install_hook()\n")
    return site


def backend(src: str) -> str:
    """The source's PEP 517 backend module (pyproject.toml's build-backend), or setuptools' default."""
    try:
        with open(os.path.join(src, "pyproject.toml"), encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return "setuptools"
    found = re.search(r"""^\s*build-backend\s*=\s*["']([A-Za-z0-9_.:]+)["']""", text, re.MULTILINE)
    return found.group(1).split(".")[0].split(":")[0] if found else "setuptools"


def summary(log: str) -> str:
    """The build's parallel compiles, one line (build-library.sh prints it)."""
    try:
        with open(log, encoding="utf-8") as handle:
            entries = [json.loads(line) for line in handle if line.strip()]
    except (OSError, ValueError):
        entries = []
    if not entries:
        return "no compile step with more than one translation unit ran in parallel"
    units, peak = sum(e["units"] for e in entries), max(e["peak"] for e in entries)
    threads = sorted({e["nvcc_threads"] for e in entries if e.get("nvcc_threads")})
    cuda = f", nvcc --threads {'/'.join(map(str, threads))} for CUDA units" if threads else ""
    return f"{units} translation unit(s) in {len(entries)} compile step(s), at most {peak} compilers at once{cuda}"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python3 -m wfbuild.parallel_compile", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="put the hook into a build environment").add_argument("--python", required=True)
    sub.add_parser("backend", help="print the source's build backend").add_argument("--src", required=True)
    sub.add_parser("summary", help="one line from WF_PARALLEL_LOG").add_argument("--log", required=True)
    args = parser.parse_args(argv)
    if args.command == "install":
        print(install(args.python))
    elif args.command == "backend":
        print(backend(args.src))
    else:
        print(summary(args.log))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
