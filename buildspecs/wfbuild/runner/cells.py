"""A job's cells on this host: how many build at once, with what MAX_JOBS and nvcc threads (this host's
cores and memory, split by wfbuild.compiling.parallelism so nothing swaps), each cell's stages in order, the cells
side by side. WF_CELL_SLOTS / WF_NVCC_THREADS in the runner's environment pin the split."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping
from typing import TYPE_CHECKING

from wfbuild import hostinfo
from wfbuild.compiling import compiler_cache, compiler_memory, parallelism
from wfbuild.images import container
from wfbuild.stages.stages import Stage

if TYPE_CHECKING:
    from wfbuild.runner.job import Job


def spare_gib(job: Job) -> float:
    """This host's memory less what the runner keeps for itself (WF_RESERVE_GIB, default 4)."""
    return hostinfo.memory_gib() - float(job.job.get("env", {}).get("WF_RESERVE_GIB") or 4.0)


def limits(job: Job) -> container.Limits:
    """Each stage container's cap: this host's cores, its memory less the runner's reserve."""
    memory = max(1.0, spare_gib(job))
    return container.Limits(memory_mib=int(memory * 1024), cpus=hostinfo.cores())


def compiler_pool(job: Job) -> str:
    """Which compiler cache server runs the cells' compilers (wfbuild.compiling.parallelism.cell_slots' ``pool``): host
    mode's one for the job, if it started; a container's own per stage, if the stack's cache is wanted."""
    if job.mode == "none":
        return "job" if job.cache is not None and job.cache.running else ""
    return "stage" if compiler_cache.wanted(job.job.get("env", {}), job.bucket) else ""


def cell_slots(job: Job, cells: int) -> parallelism.CellSlots:
    """Cells at once, MAX_JOBS and nvcc threads of each."""
    env = job.job.get("env", {})
    cores = hostinfo.cores()
    threads = job.environ.get("WF_NVCC_THREADS")
    ext = job.job.get("extension") or {}
    src = job.work / "src" / str(ext.get("name") or "")
    units = parallelism.cuda_units(src) if job.job.get("cuda") and ext and src.is_dir() else None
    if units is not None:
        job.log.note(f"{units} .cu file(s) in the source: nvcc threads take the cores they leave")
    per_job, per_thread = gib_per_compiler(job)
    return parallelism.cell_slots(
        cores,
        spare_gib(job),
        per_job,
        per_thread,
        cells,
        int(env.get("MAX_JOBS") or cores),
        parallelism.arch_count(job.job.get("arch_list")) if job.job.get("cuda") else 1,
        int(job.environ.get("WF_CELL_SLOTS") or 0) or None,
        int(threads) if threads else None,
        units,
        compiler_pool(job),
    )


def planned_gib(job: Job) -> tuple[float, float]:
    """The plan's memory of a compile job and of each further nvcc thread (the source's recorded peak per
    unit, or the model: wheelfoundry.planning.walltime)."""
    env = job.job.get("env", {})
    return float(env.get("WF_GIB_PER_COMPILE_JOB") or 2.0), float(env.get("WF_GIB_PER_NVCC_THREAD") or 1.0)


def gib_per_compiler(job: Job) -> tuple[float, float]:
    """Memory a compile job and each further nvcc thread is planned at: the plan's figures, or what the same
    rule gives an earlier attempt's peak, if larger (wfbuild.runner.compile_memory)."""
    planned = planned_gib(job)
    return job.memory.gib_per_compiler(planned[0]), job.memory.gib_per_compiler(planned[1])


def memory_held(job: Job) -> tuple[str, dict[str, float | str]]:
    """The cells' line's memory part and the manifest's record of it: one figure per compiler, whose it is
    (the plan's, or an earlier attempt's peak by the plan's rule), so the log, the manifest and ``status``
    print what the plan would (wfbuild.compiling.compiler_memory)."""
    per_job = gib_per_compiler(job)[0]
    fit = int(spare_gib(job) // per_job)
    at_once = f", {fit} at once" if fit < hostinfo.cores() else ""
    words = f"; memory: {max(0.0, spare_gib(job)):.1f} GiB for compilers at {compiler_memory.words(per_job)} each"
    whose = "earlier attempt" if per_job > planned_gib(job)[0] else "plan"
    return words + at_once, {"gib_per_compiler": per_job, "gib_per_compiler_from": whose}


def nvcc_env(job: Job, env: Mapping[str, str], extra: Mapping[str, str], cached: bool) -> dict[str, str]:
    """A compile stage's nvcc flags for its cell's thread count (``extra``: run_cells' split). An extension's
    count ends nvcc's command line even at 1, so a ``--threads`` its setup.py writes gives way to it;
    sccache (a host server, or a stage's own) cannot take -objtemp."""
    threads = int(extra.get("WF_NVCC_THREADS") or 1)
    last_word = bool(job.job.get("extension"))
    return parallelism.nvcc_threads_env(env, threads, objtemp=not cached, last_word=last_word)


def run_cells(job: Job, pairs: list[tuple[Stage, Stage]], image: str, fatal_failed: bool) -> None:
    """The cells' stages (host and container renderings), cell by cell in order, cells side by side."""
    groups: dict[str, list[tuple[Stage, Stage]]] = {}
    for pair in pairs:
        groups.setdefault(pair[0].group or "", []).append(pair)
    slots = cell_slots(job, len(groups))
    each = f"MAX_JOBS={slots.jobs} each, nvcc --threads {slots.threads}"
    # setuptools without ninja: wfbuild.compiling.parallel_compile sees each compile step's .cu files
    alone = f" ({slots.alone} for a .cu file compiling alone without ninja)" if slots.alone > slots.threads else ""
    within = f"the compiler cache's pool keeps the compilers at once within the {hostinfo.cores()} cores"
    pooled = f" ({within})" if slots.unpooled else ""  # unpooled 0: no pool (cell_slots)
    held, memory = memory_held(job)
    job.log.note(f"{len(groups)} cell(s), {slots.cells} at a time, {each}{alone}{pooled}{held}")
    job.parallelism = {
        "cells_at_once": slots.cells,
        "max_jobs": slots.jobs,
        "nvcc_threads": slots.threads,
        "nvcc_threads_alone": slots.alone,
        "nvcc_threads_pooled": bool(slots.unpooled),
        **memory,
    }
    extra = {"MAX_JOBS": str(slots.jobs), "CMAKE_BUILD_PARALLEL_LEVEL": str(slots.jobs)}
    extra["WF_CELLS_AT_ONCE"] = str(slots.cells)  # an OOM's explanation: the cell's share of the memory
    extra |= {"WF_NVCC_THREADS": str(slots.threads), "WF_NVCC_THREADS_ALONE": str(slots.alone)}
    if slots.unpooled:  # a server that does not start (a container's own) compiles with the count for no pool
        extra |= {"WF_NVCC_THREADS_UNPOOLED": str(slots.unpooled), "WF_NVCC_THREADS_POOLED": "1"}

    def chain(name: str) -> None:
        for pair in groups[name]:
            job.step(pair, image, fatal_failed, extra)

    with concurrent.futures.ThreadPoolExecutor(max_workers=slots.cells) as pool:
        for future in [pool.submit(chain, name) for name in groups]:
            future.result()
