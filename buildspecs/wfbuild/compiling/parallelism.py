"""How an instance's cores and memory are shared by the cells it builds: cells at once, MAX_JOBS, nvcc threads.

A CUDA cell's nvcc call compiles each architecture of TORCH_CUDA_ARCH_LIST in turn; ``--threads N`` has
nvcc run N of them side by side (cicc and ptxas per architecture). It reaches every nvcc call of a build,
torch's BuildExtension and CMake alike, through ``NVCC_APPEND_FLAGS`` (read by nvcc >= 11.5), so no
package is edited. The cores go first to cells (one compile job each, as memory allows); then, where the
runner has counted the source's ``.cu`` files, MAX_JOBS keeps the cell's cores and nvcc threads take what
the CUDA units leave (``cell_slots``; a build without ninja shares them per compile step instead:
wfbuild.compiling.parallel_compile), else (the planner's model) to nvcc threads (up to the architecture
count), then to MAX_JOBS: cells x MAX_JOBS x threads stays within the cores. Threads give way while the
memory (a job's, plus a thread's for each further thread) does not fit. Where the compiler cache's server
runs the compilers, its pool of one token per core already holds them to the cores, so every nvcc may ask
for the cell's cores (``cell_slots``' ``pool``): the last ``.cu`` file left compiling takes them. The planner
(wheelfoundry.planning.walltime.compile_slots) models the second way: it has no source to count.

The thread count changes how long a compile takes, never what it writes: each architecture's cubin is
compiled by the same cicc/ptxas invocations and fatbinary orders them by the arch list
(tests/buildspecs/test_nvcc_threads.py builds a cell both ways and compares the wheels' sha256).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

MAX_NVCC_THREADS = 8


@dataclass(frozen=True)
class CellSlots:
    cells: int  # cells built at once
    jobs: int  # MAX_JOBS of each
    threads: int  # nvcc --threads of each (1: no flag)
    alone: int = 1  # nvcc --threads of a .cu file that compiles alone in its cell (wfbuild.compiling.parallel_compile)
    unpooled: int = 0  # under a compiler cache's pool: the threads should its server not run (0: no pool)


def arch_count(arch_list: str | None) -> int:
    """Device targets of one nvcc call: one per listed architecture (``+PTX`` rides with its SASS)."""
    return len([a for a in (arch_list or "").replace(" ", ";").split(";") if a]) or 1


def cell_slots(
    cores: int,
    spare_gib: float,
    gib_per_job: float,
    gib_per_thread: float,
    cells: int,
    max_jobs: int,
    archs: int,
    slots_override: int | None = None,
    threads_override: int | None = None,
    cuda_units: int | None = None,
    pool: str = "",
) -> CellSlots:
    """Cells at once, MAX_JOBS and nvcc threads; ``archs`` 1 (or a CPU job) means no threads.

    ``cuda_units``: the ``.cu`` files of the source (the runner counts them), when known. Then MAX_JOBS
    keeps every core of the cell (the C++ units compile beside the CUDA ones) and nvcc threads take the
    cores the CUDA units leave: a package of one ``.cu`` file on 2 cores compiles it with 2 threads
    beside its ``.cpp``, one of 8 ``.cu`` files with none. Unknown (the planner's model), threads first.
    ``alone``: the threads of one ``.cu`` file compiling with no other nvcc beside it in the cell, which
    wfbuild.compiling.parallel_compile gives a ninja-less compile step's CUDA units (one extension per ``.cu`` file:
    one nvcc at a time however many files the tree holds), shared by those that run at once, or by all
    MAX_JOBS compilers while extensions that share no object file build side by side.

    ``pool``: which compiler cache server runs the cells' compilers, "job" (host mode: one for every cell)
    or "stage" (a container's own: one per cell), "" none. sccache 0.16 spawns each compiler process, nvcc's
    per-architecture steps included, only with a token of its server's pool, as many as the cores
    (mozilla/sccache@v0.16.0:src/mock_command.rs, ``AsyncCommand::spawn``), so every nvcc may ask for
    threads up to the cell's cores: while several compile, the pool holds them to the cores; once one is
    left (the tail of every ninja build: causal-conv1d's ``bwd.cu``, alone for most of its cell),
    its architectures take the cores the others freed. That holds for one server of all the cells, or for
    one cell at a time; memory holds when the cores' worth of compile jobs fits."""
    by_memory = max(1, int(spare_gib // gib_per_job))
    units = max(1, min(cores, by_memory, max_jobs))
    slots = max(1, min(cells, units, slots_override or cells))
    per_cell = max(1, cores // slots)
    if cuda_units is not None and archs > 1:
        jobs = max(1, min(units // slots, per_cell))

        def fitting(side_by_side: int) -> int:  # threads of each of ``side_by_side`` nvcc calls at once
            threads = threads_override or min(archs, max(1, per_cell // side_by_side), MAX_NVCC_THREADS)
            while threads > 1 and not threads_override:
                if slots * (jobs * gib_per_job + side_by_side * (threads - 1) * gib_per_thread) <= spare_gib:
                    break
                threads -= 1
            return max(1, threads)

        shared = fitting(max(1, min(jobs, cuda_units)))
        if (pool == "job" or (pool == "stage" and slots == 1)) and by_memory >= cores and not threads_override:
            pooled = min(archs, per_cell, MAX_NVCC_THREADS)
            return CellSlots(slots, jobs, pooled, pooled, shared)
        return CellSlots(slots, jobs, shared, fitting(1))
    threads = threads_override or min(archs, per_cell, MAX_NVCC_THREADS)
    while True:
        jobs = max(1, min(units // slots, per_cell // threads))
        fits = slots * jobs * (gib_per_job + (threads - 1) * gib_per_thread) <= spare_gib
        if threads == 1 or fits or threads_override:
            return CellSlots(slots, jobs, max(1, threads), max(1, threads))
        threads -= 1


def cuda_units(root: Path, limit: int = 50_000) -> int:
    """The ``.cu`` files under ``root`` (a build's own tree: links not followed, at most ``limit`` entries)."""
    found = seen = 0
    for _dir, dirs, files in os.walk(root, followlinks=False):
        seen += len(dirs) + len(files)
        found += sum(1 for f in files if f.endswith(".cu"))
        if seen > limit:
            break
    return found


def nvcc_threads_env(
    env: Mapping[str, str], threads: int, objtemp: bool = True, last_word: bool = False
) -> dict[str, str]:
    """The one place this module's nvcc flags are assembled: ``env``'s NVCC_APPEND_FLAGS with ``--threads``
    appended (none when ``threads`` is 1, nvcc's default) and, for CUDA >= 13.0 (checked here with the
    repository's 13.0 lock), ``-objtemp``: nvcc then names its intermediate files after the object, not
    ``tmpxft_<pid>``, whose name reaches the object's symbols (``_GLOBAL__sub_I_tmpxft_..._cudafe1.cpp``), so
    two builds differ by nvcc's process ids whatever the thread count. Other NVCC_APPEND_FLAGS (the
    reproducibility prefix maps, a pin's own) are kept in order; a ``--threads`` already there wins.
    Such a ``--threads`` also turns off wfbuild.compiling.parallel_compile's per-step threads
    (``WF_NVCC_THREADS_ALONE`` 1). ``objtemp`` False: sccache wraps nvcc (0.16 replays nvcc's --dryrun
    steps and loses the object with -objtemp: checked here), so the pid names stay (wfbuild.wheels.reproducible
    does not promise those bytes). ``last_word`` (an extension's CUDA cell): ``--threads`` goes on even at
    1, so it ends every nvcc command line (NVCC_APPEND_FLAGS come after the package's own flags, and nvcc
    keeps the last of a repeated option): a package that writes its own count into its nvcc flags
    (causal-conv1d 1.7.0's and fast-hadamard-transform 1.1.0's setup.py: ``--threads 4``) compiles with
    the count the cell's cores and memory were shared for, not 4 on each of MAX_JOBS compilers."""
    flags = shlex.split(env.get("NVCC_APPEND_FLAGS", ""))
    own = "--threads" in flags or "-t" in flags or any(f.startswith("--threads=") for f in flags)
    extra = []
    if not own and (threads > 1 or (last_word and env.get("CUDA_VERSION"))):
        extra.append(f"--threads {threads}")
    if objtemp and _cuda_at_least(env.get("CUDA_VERSION", ""), (13, 0)) and "-objtemp" not in flags:
        extra.append("-objtemp")
    out = {"WF_NVCC_THREADS_ALONE": "1"} if own and "WF_NVCC_THREADS_ALONE" in env else {}
    if extra:
        out["NVCC_APPEND_FLAGS"] = " ".join(filter(None, [env.get("NVCC_APPEND_FLAGS", ""), *extra]))
    return out


def _cuda_at_least(version: str, least: tuple[int, int]) -> bool:
    parts = version.split(".")
    try:
        return (int(parts[0]), int(parts[1]) if len(parts) > 1 else 0) >= least
    except ValueError:
        return False
