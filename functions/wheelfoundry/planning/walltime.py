"""Wall time of an extension job, and the layout of a (platform, CUDA toolkit)'s cells over instances.

The model. A cell is ``work`` core-hours of compiling (calibrated: wheelfoundry.planning.calibration) plus a serial
part that no core count shortens (its build environment, link, repair, smoke test). A cell keeps at most
``width`` cores busy: the translation units it compiles at once (``extension_cores_per_cell``) times the
architectures each nvcc call compiles side by side (``--threads``, CUDA only). An instance runs
``slots`` cells at once, each with MAX_JOBS compile jobs and nvcc threads such that
slots x MAX_JOBS x threads stays within its cores and the memory holds (``compile_slots``; the runner
re-checks on the host: wfbuild.compiling.parallelism). A job's wall is its setup plus its waves of cells.

The layout. One (platform, toolkit)'s cells may run on one instance or be split evenly over several
(``shards``), each on an instance type from ``[layout] extension_instances`` (and, once the source's cells
have been measured, ``extension_instances_measured``: sizes a narrow cell can keep busy). ``choose_layouts`` picks,
over all groups at once, the cheapest combination whose longest job meets ``max_wall_hours`` within the
guardrails on jobs per run and instance-hours; when none does, the fastest one within them, and says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from wheelfoundry.config import FarmConfig, InstanceType
from wheelfoundry.planning import compiler_memory

MAX_NVCC_THREADS = 8  # past this, one nvcc call's host-side steps dominate


@dataclass(frozen=True)
class Slots:
    """How an instance runs its cells: ``cells`` at once, each with MAX_JOBS ``jobs`` and nvcc ``threads``."""

    cells: int
    jobs: int
    threads: int
    width: float  # cores one cell keeps busy


@dataclass(frozen=True)
class CellCost:
    """One cell's compile work (core-hours) and serial hours, and where the figure came from."""

    work: float
    serial: float
    source: str  # "catalog model" or "recorded runs of this source (N cells)"
    recorded: bool = False  # from measured builds of this source (wfbuild.compiling.cpu_usage), not the model
    # Cores a compiling cell of this source kept busy when it had more (recorded: its own parallelism,
    # e.g. a package of few translation units); None: no limit seen, it used what it was given.
    width_limit: float | None = None
    # Translation units one cell compiles, where the source was read (wheelfoundry.planning.source_profile): the
    # cores it can keep busy at once (times nvcc threads); None: the catalog's extension_cores_per_cell.
    units: int | None = None
    # The largest compiler process (GiB) recorded runs of the source ran (wfbuild.compiling.memwatch); None: the model's
    # gib_per_compile_job and gib_per_nvcc_thread until a run has measured it.
    peak_gib: float | None = None
    wheel_bytes: int | None = None  # a cell wheel's size from recorded runs of the source; None: not recorded

    def gib_per_compiler(self, cuda: bool, config: FarmConfig) -> tuple[float, float]:
        """Memory of one compile job and of each further nvcc thread: a recorded peak with headroom (each
        thread runs another cicc/ptxas of about the same size), else the model (config.toml [defaults])."""
        if self.peak_gib is not None:
            each = compiler_memory.gib_per_compiler(self.peak_gib)
            return each, each
        return config.gib_per_compile_job["cuda" if cuda else "cpu"], config.gib_per_nvcc_thread

    @property
    def memory_source(self) -> str:
        if self.peak_gib is None:
            return "the model's: no run of this source has measured it yet"
        return f"{compiler_memory.words(self.peak_gib)}, the largest compiler a recorded run of this source ran"


@dataclass(frozen=True)
class Option:
    """One group's cells on ``shards`` instances of ``instance``: the longest job, instance-hours, dollars."""

    instance: InstanceType
    shards: int
    slots: Slots
    wall: float
    hours: float
    usd: float
    busy: float = 1.0  # expected cores busy while the cells compile: compile core-hours / (vCPUs x compile hours)


def archs(arch_list: str | None) -> list[str]:
    """The entries of a TORCH_CUDA_ARCH_LIST (``;`` or spaces between them): ``["8.0", "9.0+PTX"]``."""
    return [a for a in (arch_list or "").replace(" ", ";").split(";") if a]


def arch_count(arch_list: str | None) -> int:
    """Device code targets of one nvcc call: one per listed architecture (``+PTX`` rides with its SASS)."""
    return len(archs(arch_list)) or 1


def compile_slots(
    instance: InstanceType,
    cells: int,
    cuda: bool,
    archs: int,
    config: FarmConfig,
    *,
    threads_on: bool = True,
    cost: CellCost | None = None,
) -> Slots:
    """Cells at once, MAX_JOBS and nvcc threads for ``cells`` cells on ``instance``: cores and memory shared.

    Cells first (memory at one compile job each, as before), then each cell's cores go to nvcc threads
    (up to the architecture count), then to MAX_JOBS; threads give way while the memory does not hold.
    A cell's width: recorded builds of the source (``cost.recorded``) keep the cores they are given, up to
    the limit they showed; the catalog's model, ``extension_cores_per_cell`` units times the threads."""
    per_job, per_thread = (cost or CellCost(0.0, 0.0, "")).gib_per_compiler(cuda, config)
    spare = instance.memory_gib - config.reserve_gib
    units = max(1, min(instance.vcpus, math.floor(spare / per_job), config.max_jobs_cap))
    slots = max(1, min(cells, units))
    cores = max(1, instance.vcpus // slots)
    threads = min(archs, cores, MAX_NVCC_THREADS) if cuda and threads_on else 1
    while True:  # MAX_JOBS within the cores, and within the memory at one thread (the runner's rule too)
        jobs = max(1, min(cores // threads, units // slots))
        if threads == 1 or slots * jobs * (per_job + (threads - 1) * per_thread) <= spare:
            break
        threads -= 1
    given = min(cores, jobs * threads)
    if cost is not None and cost.recorded:
        width = min(given, cost.width_limit) if cost.width_limit else given
    else:
        units_per_cell = cost.units if cost is not None and cost.units else None
        if units_per_cell is None:
            units_per_cell = int(config.estimates["extension_cores_per_cell"]["cuda" if cuda else "cpu"])
        width = min(given, min(jobs, units_per_cell) * threads)
    return Slots(slots, jobs, threads, max(0.1, round(width, 3)))


def job_wall(cells: int, cost: CellCost, slots: Slots, config: FarmConfig) -> float:
    """Hours from launch to the last cell's smoke test: setup, then waves of ``slots.cells`` cells."""
    per_cell = cost.work / slots.width + cost.serial
    return float(config.estimates["setup"]) + math.ceil(cells / slots.cells) * per_cell


def cores_busy(instance: InstanceType, sizes: Sequence[int], slots: Sequence[Slots]) -> float:
    """Expected share of the instances' cores busy while their cells compile: each wave of ``slot.cells``
    cells takes work / width hours on all ``instance.vcpus`` (compile core-hours / vCPU-hours held)."""
    held = sum(instance.vcpus * math.ceil(n / slot.cells) / slot.width for n, slot in zip(sizes, slots, strict=True))
    return round(min(1.0, sum(sizes) / held), 3) if held else 1.0


def usd_per_hour(instance: InstanceType, spot: bool, config: FarmConfig) -> float:
    price = instance.usd_per_hour * (config.spot_factor if spot else 1.0)
    return price + config.root_volume_usd_per_hour


def shard_sizes(cells: int, shards: int) -> list[int]:
    """``cells`` split as evenly as can be over ``shards`` jobs (largest first)."""
    return [cells // shards + (1 if i < cells % shards else 0) for i in range(shards)]


def options(
    cells: int, cuda: bool, archs: int, cost: CellCost, platform: str, spot: bool, config: FarmConfig
) -> list[Option]:
    """Every (instance type, shard count) for one group, each priced and timed."""
    found = []
    names = config.extension_instances.get(platform, ())
    if cost.recorded or cost.units:  # the cells' width is known (measured, or their units): sizes they can fill
        names = (*config.extension_instances_measured.get(platform, ()), *names)
    per_job = cost.gib_per_compiler(cuda, config)[0]
    holding = [n for n in names if config.instance_types[n].memory_gib - config.reserve_gib >= per_job]
    for name in holding or names:  # a type that cannot hold one compiler of the source would OOM-kill it
        instance = config.instance_types[name]
        for shards in range(1, cells + 1):
            sizes = shard_sizes(cells, shards)
            each = [compile_slots(instance, n, cuda, archs, config, cost=cost) for n in sizes]
            walls = [job_wall(n, cost, slot, config) for n, slot in zip(sizes, each, strict=True)]
            hours = sum(round(w, 2) for w in walls)
            rate = usd_per_hour(instance, spot, config)
            busy = cores_busy(instance, sizes, each)
            usd = sum(round(w * rate, 2) for w in walls)
            found.append(Option(instance, shards, each[0], max(walls), hours, usd, busy))
    return found


@dataclass(frozen=True)
class Layout:
    chosen: tuple[Option, ...]  # one per group, in the groups' order
    met: bool  # False: no layout within the guardrails meets max_wall_hours; ``chosen`` is the fastest

    @property
    def wall(self) -> float:
        return max((o.wall for o in self.chosen), default=0.0)


def choose_layouts(groups: Sequence[list[Option]], max_wall: float, max_jobs: int, max_hours: float) -> Layout:
    """Cheapest per-group choice whose longest job meets ``max_wall`` with at most ``max_jobs`` jobs and
    ``max_hours`` instance-hours in all (a knapsack over jobs: groups are few, jobs at most ~100)."""
    best = _cheapest(groups, max_wall, max_jobs, max_hours)
    if best is not None:
        return Layout(best, True)
    # Unreachable: the smallest wall any layout within the guardrails gets, then the cheapest at that wall.
    walls = sorted({round(o.wall, 4) for g in groups for o in g})
    for wall in walls:
        best = _cheapest(groups, wall + 1e-9, max_jobs, max_hours)
        if best is not None:
            return Layout(best, False)
    return Layout(tuple(min(g, key=lambda o: (o.shards, o.usd)) for g in groups), False)


def _cheapest(
    groups: Sequence[list[Option]], max_wall: float, max_jobs: int, max_hours: float
) -> tuple[Option, ...] | None:
    # state: jobs used -> (usd, hours, choices); keep the cheapest per job count
    states: dict[int, tuple[float, float, tuple[Option, ...]]] = {0: (0.0, 0.0, ())}
    for group in groups:
        fitting = [o for o in group if o.wall <= max_wall]
        nxt: dict[int, tuple[float, float, tuple[Option, ...]]] = {}
        for used, (usd, hours, picked) in states.items():
            for o in fitting:
                jobs, cost, total = used + o.shards, usd + o.usd, hours + o.hours
                if jobs > max_jobs or total > max_hours:
                    continue
                key = (round(cost, 4), total, jobs)
                if jobs not in nxt or key < (round(nxt[jobs][0], 4), nxt[jobs][1], jobs):
                    nxt[jobs] = (cost, total, (*picked, o))
        if not nxt:
            return None
        states = nxt
    return min(states.items(), key=lambda s: (round(s[1][0], 4), s[1][1], s[0]))[1][2]
