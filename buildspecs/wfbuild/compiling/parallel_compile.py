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

The hook is installed into a build environment (``python -m wfbuild.compiling.parallel_compile_tool install
--python ENV/bin/python``) as a ``.pth`` line that imports this file's copy, which must stand alone
(it imports nothing of wfbuild); it does nothing unless ``WF_COMPILE_JOBS`` > 1, and patches distutils
only when a build imports it. Each parallel ``compile`` (and each side-by-side ``build_ext`` loop)
appends one JSON line to ``WF_PARALLEL_LOG``, which the tool sums up for the build's log.

A compile step knows how many of its units are CUDA files, which the runner, counting a whole tree's
``.cu`` files, does not: the PyG packages build one extension per ``.cu`` file, one extension after
another, so one nvcc runs at a time however many the tree holds. Where the runner exports
``WF_NVCC_THREADS_ALONE`` (the nvcc threads its cell's cores and memory give one ``.cu`` file compiling
alone: wfbuild.compiling.parallelism), each ``.cu`` unit's nvcc gets that many threads shared by the step's ``.cu``
units that run at once (``unit_threads``), through its own copy of NVCC_APPEND_FLAGS. The thread count
never changes the bytes (tests/buildspecs/test_nvcc_threads.py).

Those packages also build their extensions one after another, and each extension's last steps (nvcc's
cudafe++ and host compile, the link) leave all but one core idle; so does an extension of one unit. So
``build_ext``'s serial loop is wrapped too: extensions that share no object file (torch-scatter's
``_scatter_cpu`` and ``_scatter_cuda`` compile the same ``scatter.cpp`` to the same ``scatter.o``, so they
share a chain) build in forked children, one chain each, in their own order within it, while a pipe of
``WF_COMPILE_JOBS`` tokens (make's jobserver) bounds the compilers of all chains together; a CUDA unit then
gets the threads of one alone divided by the compilers at once (processes x threads = cores, as the
runner's memory model assumes). Only where that is known to be safe: the stock ``build_extension`` (not a
package's own, which may run CMake in the shared build_temp), no ninja (torch writes one build.ninja for
every extension), no SWIG sources. The wheel is the serial build's, byte for byte
(tests/buildspecs/test_parallel_extensions.py). ``WF_EXTENSION_CHAINS=off`` in the runner's environment
keeps the serial loop (bench/nvcc_threads.py's baseline; a way out should a package's build misbehave).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import json
import os
import re
import select
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

SUFFIXES = ("distutils.ccompiler", "distutils.compilers.C.base", "distutils.command.build_ext")
STOCK = ("setuptools.command.build_ext", "distutils.command.build_ext")  # build_extension not the package's
CUDA_FILES = (".cu", ".cuh")  # what torch.utils.cpp_extension compiles with nvcc (_is_cuda_file)
_THREADS = re.compile(r"(?:^|\s)--threads[= ]\d+(?=\s|$)")  # the runner's own (wfbuild.compiling.parallelism)
_LOCK = threading.Lock()


def jobs() -> int:
    try:
        return max(1, int(os.environ.get("WF_COMPILE_JOBS") or 1))
    except ValueError:
        return 1


def unit_threads(sources: list[str], limit: int) -> int:
    """nvcc threads for each CUDA unit of a compile step of ``sources``, ``limit`` units at a time: the
    threads of one alone, shared by the CUDA units that run at once (not shared where the runner says
    the compiler cache's server runs the compilers: WF_NVCC_THREADS_POOLED, wfbuild.compiling.parallelism); 0 leaves
    NVCC_APPEND_FLAGS as set."""
    try:
        alone = int(os.environ.get("WF_NVCC_THREADS_ALONE") or 0)
    except ValueError:
        return 0
    cuda = sum(1 for source in sources if source.endswith(CUDA_FILES))
    at_once = jobs() if _SLOTS is not None else min(limit, cuda)  # chains: other extensions' compilers too
    if os.environ.get("WF_NVCC_THREADS_POOLED") == "1":  # the compiler cache's pool holds them to the cores
        at_once = 1
    return max(1, alone // at_once) if alone > 1 and cuda else 0


def with_threads(flags: str, threads: int) -> str:
    """``flags`` (NVCC_APPEND_FLAGS) with the runner's ``--threads`` replaced by ``threads``, 1 included: the
    last ``--threads`` on nvcc's command line wins over one the package's own flags carry."""
    kept = _THREADS.sub("", flags).strip()
    return f"{kept} --threads {threads}".strip()


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


class Slots:
    """Compilers that may run at once across forked processes: one byte each in a pipe, as make's jobserver
    does. A unit's child takes one before it starts and gives it back as it ends."""

    def __init__(self, count: int) -> None:
        self.read, self.write = os.pipe()
        os.set_blocking(self.read, False)
        os.write(self.write, b"+" * count)

    def take(self) -> bool:
        try:
            return os.read(self.read, 1) == b"+"
        except BlockingIOError:
            return False

    def give(self) -> None:
        os.write(self.write, b"+")

    def wait(self) -> None:
        """Until a slot may be free (another process gave one back), or a moment: never a busy loop."""
        select.select([self.read], [], [], 0.05)

    def close(self) -> None:
        os.close(self.read)
        os.close(self.write)


_SLOTS: Slots | None = None  # set while chains of extensions build side by side (their children inherit it)


@contextlib.contextmanager
def _slot() -> Iterator[None]:
    """One compiler slot for a unit compiled in this process (a step of one unit), while chains run."""
    slots = _SLOTS
    if slots is None:
        yield
        return
    while not slots.take():
        slots.wait()
    try:
        yield
    finally:
        slots.give()


def run_forked(
    calls: list[tuple[Any, ...]],
    compile_one: Any,
    limit: int,
    error: type[Exception],
    slotted: bool = True,
    what: str = "translation unit(s)",
) -> int:
    """Run ``compile_one(*call)`` for every call, each in a forked child, ``limit`` at a time (and, where
    ``slotted`` and chains run, as the shared slots allow); the peak number of children. Raises ``error``
    naming each failed call by ``call[1]`` (a source, a chain's extensions; the compiler said why)."""
    pending, peak = list(calls), 0
    running: dict[int, tuple[Any, ...]] = {}
    failed: list[str] = []
    slots = _SLOTS if slotted else None
    while pending or running:
        while pending and len(running) < limit and not failed and (slots is None or slots.take()):
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
                    print(f"wfbuild.compiling.parallel_compile: {call[1]}: {exc}", file=sys.stderr)
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    if slots is not None:
                        slots.give()
                    os._exit(code)
            running[pid] = call
            peak = max(peak, len(running))
        for pid in list(running):  # our own children only: never another thread's subprocess
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                call = running.pop(pid)
                if slots is not None and os.WIFSIGNALED(status):  # killed before it could give its slot back
                    slots.give()
                if os.waitstatus_to_exitcode(status) != 0:
                    failed.append(str(call[1]))
                    pending.clear()  # the running units finish; no new one starts
        if running:
            time.sleep(0.02)
        elif pending and slots is not None:  # nothing of ours runs: wait for another chain to free a slot
            slots.wait()
    if failed:
        raise error(f"{len(failed)} {what} failed to compile: {', '.join(failed)}")
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
            with _slot(), _nvcc_flags(unit_threads([str(source) for source in sources], 1)):
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
            with _slot():
                for call in queued:
                    one(*call)
            return objects
        peak = run_forked(queued, one, limit, error)
        seconds = round(time.monotonic() - started, 2)
        _record({"units": len(queued), "jobs": limit, "peak": peak, "seconds": seconds, "nvcc_threads": threads})
        cuda = f", nvcc --threads {threads} for its CUDA unit(s)" if threads else ""
        print(
            f"wfbuild.compiling.parallel_compile: {len(queued)} units, up to {limit} at a time{cuda}, {seconds}s",
            file=sys.stderr,
        )
        return objects

    compile.__wf_parallel__ = True  # type: ignore[attr-defined]
    return compile


def chains(objects: list[list[str]]) -> list[list[int]]:
    """Extensions (by index, given each one's object files) in groups that share no object file with
    another group, each in its original order: what may build side by side."""
    root = list(range(len(objects)))

    def find(i: int) -> int:
        while root[i] != i:
            i = root[i]
        return i

    owner: dict[str, int] = {}
    for index, files in enumerate(objects):
        for name in files:
            first = owner.setdefault(os.path.normpath(name), index)
            root[find(index)] = find(first)
    groups: dict[int, list[int]] = {}
    for index in range(len(objects)):
        groups.setdefault(find(index), []).append(index)
    return sorted(groups.values())


def _independent(command: Any) -> list[list[Any]] | None:
    """The command's extensions in chains, or None where building them side by side is not known safe."""
    if getattr(command, "use_ninja", False) or getattr(command, "parallel", None):
        return None  # torch's ninja writes one build_temp/build.ninja for all; --parallel is the user's threads
    if type(command).build_extension.__module__.removeprefix("setuptools._") not in STOCK:
        return None  # a package's own build_extension (CMake in the shared build_temp, ...)
    extensions = list(command.extensions)
    if any(str(source).endswith(".i") for ext in extensions for source in ext.sources):
        return None  # SWIG writes its wrappers beside the sources
    try:
        objects = [
            command.compiler.object_filenames(sorted(e.sources), output_dir=command.build_temp) for e in extensions
        ]
    except Exception:
        return None
    groups = chains(objects)
    return [[extensions[i] for i in group] for group in groups] if len(groups) > 1 else None


def _build_chain(command: Any, _names: str, extensions: list[Any]) -> None:
    for ext in extensions:  # what the serial loop does, for this chain's extensions
        with command._filter_build_errors(ext):
            command.build_extension(ext)


def _wrap_serial(original: Any, error: type[Exception]) -> Any:
    def serial(self: Any) -> Any:
        global _SLOTS
        limit = jobs()
        wanted = os.environ.get("WF_EXTENSION_CHAINS", "on") != "off"  # off: the bench's baseline, a way out
        groups = _independent(self) if wanted and limit > 1 and _SLOTS is None and len(self.extensions) > 1 else None
        if not groups:
            return original(self)
        started = time.monotonic()
        calls = [(self, ", ".join(ext.name for ext in group), group) for group in groups]
        _SLOTS = Slots(limit)
        try:  # a chain holds no slot itself: its compile steps take them
            run_forked(calls, _build_chain, len(calls), error, slotted=False, what="chain(s) of extensions")
        finally:
            _SLOTS.close()
            _SLOTS = None
        seconds = round(time.monotonic() - started, 2)
        _record({"extensions": len(self.extensions), "chains": len(groups), "jobs": limit, "seconds": seconds})
        print(
            f"wfbuild.compiling.parallel_compile: {len(self.extensions)} extensions in {len(groups)} chains side by "
            f"side, up to {limit} compilers at once, {seconds}s",
            file=sys.stderr,
        )
        return None

    serial.__wf_parallel__ = True  # type: ignore[attr-defined]
    return serial


def patch(module: Any) -> None:
    """Wrap ``compile`` of the compiler base class this module defines (CCompiler, or Compiler), or the
    serial loop of its ``build_ext``."""
    error = getattr(module, "CompileError", RuntimeError)
    for value in list(vars(module).values()):
        if not isinstance(value, type) or value.__module__ != module.__name__:
            continue
        original = vars(value).get("compile")
        if original is not None and hasattr(value, "_setup_compile") and not hasattr(original, "__wf_parallel__"):
            setattr(value, "compile", _wrap(original, error))  # noqa: B010  (a class we do not type)
        loop = vars(value).get("_build_extensions_serial")  # build_ext's
        if loop is not None and not hasattr(loop, "__wf_parallel__"):
            setattr(value, "_build_extensions_serial", _wrap_serial(loop, error))  # noqa: B010


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
