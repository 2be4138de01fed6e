"""Extension cells on one host: how many build at once, each one's MAX_JOBS, and running them side by side.

Split out of the runner (wfbuild.runner): pure arithmetic over this host's cores and memory, and a
thread pool that runs each cell's stages in order through the runner's ``step``.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Mapping
from typing import Any

from wfbuild import container, hostinfo
from wfbuild.stages import Stage

Pair = tuple[Stage, Stage]  # (as rendered for the host, as rendered for the container)


def spare_gib(job_env: Mapping[str, Any]) -> float:
    """This host's memory less what the runner keeps for itself (WF_RESERVE_GIB, default 4)."""
    return hostinfo.memory_gib() - float(job_env.get("WF_RESERVE_GIB") or 4.0)


def limits(job_env: Mapping[str, Any]) -> container.Limits:
    """Each stage container's cap: this host's cores, its memory less the runner's reserve."""
    memory = max(1.0, spare_gib(job_env))
    return container.Limits(memory_mib=int(memory * 1024), cpus=hostinfo.cores())


def slots(job_env: Mapping[str, Any], environ: Mapping[str, str], cells: int) -> tuple[int, int]:
    """(cells at once, MAX_JOBS of each): this host's cores and memory split so nothing swaps."""
    cores = hostinfo.cores()
    per_job = float(job_env.get("WF_GIB_PER_COMPILE_JOB") or 2.0)
    by_memory = max(1, int(spare_gib(job_env) // per_job))
    compile_jobs = max(1, min(cores, by_memory, int(job_env.get("MAX_JOBS") or cores)))
    at_once = max(1, min(cells, compile_jobs, int(environ.get("WF_CELL_SLOTS") or cells)))
    return at_once, max(1, compile_jobs // at_once)


def run(
    pairs: list[Pair],
    step: Callable[[Pair, dict[str, str]], object],
    note: Callable[[str], None],
    job_env: Mapping[str, Any],
    environ: Mapping[str, str],
) -> None:
    """Each cell's stages in order, cells side by side; every compile of a cell gets its MAX_JOBS
    (ninja, CMake, and setuptools without ninja through wfbuild.parallel_compile)."""
    groups: dict[str, list[Pair]] = {}
    for pair in pairs:
        groups.setdefault(pair[0].group or "", []).append(pair)
    at_once, jobs = slots(job_env, environ, len(groups))
    note(f"{len(groups)} cell(s), {at_once} at a time, MAX_JOBS={jobs} each")
    extra = {"MAX_JOBS": str(jobs), "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs)}

    def chain(name: str) -> None:
        for pair in groups[name]:
            step(pair, extra)

    with concurrent.futures.ThreadPoolExecutor(max_workers=at_once) as pool:
        for future in [pool.submit(chain, name) for name in groups]:
            future.result()
