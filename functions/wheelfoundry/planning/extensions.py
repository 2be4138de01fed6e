"""Plan a user's torch extension: cells (torch x CUDA x Python x platform) packed onto shared hosts.

Cells that can share a builder image (same platform and CUDA toolkit; any torch and Python) form
one job: one instance builds them in parallel, each cell in its own build environment, with the
instance's compile jobs and nvcc threads split between the cells that run at once. So 3 torch x 2 CUDA
x 3 Python is 2 jobs (one per CUDA toolkit), not 18, unless the run's wall-time target
(``options.max_wall_hours``) needs a toolkit's cells spread over more instances: then the cheapest layout
that meets it (wheelfoundry.planning.walltime), each part a job of its own (``<name>-<target>-2of3``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from packaging.utils import InvalidSdistFilename, parse_sdist_filename
from packaging.version import InvalidVersion, Version

from wheelfoundry.catalog.catalog import Catalog
from wheelfoundry.config import FarmConfig, InstanceType
from wheelfoundry.planning import buildenv, calibration, compiler_memory, walltime, wheel_size
from wheelfoundry.planning.calibration import cell_cost
from wheelfoundry.planning.cells import build_groups, oldest_minor
from wheelfoundry.planning.cells import index_url as torch_index_url
from wheelfoundry.planning.jobs import (
    CellSpec,
    Estimate,
    ExtensionSpec,
    Job,
    PackagePin,
    SmokeSpec,
    StackContext,
)
from wheelfoundry.planning.sizing import choose_instance, ec2_usd_per_hour, max_jobs
from wheelfoundry.planning.source_profile import SourceProfile
from wheelfoundry.planning.walltime import CellCost
from wheelfoundry.request.model import ExtensionRequest, ExtensionSource
from wheelfoundry.request.stable_wheels import stable_kind
from wheelfoundry.request.targets import target_id, variant


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def default_arch_list(catalog: Catalog, cells: tuple[CellSpec, ...], cuda: str, platform: str) -> str:
    """x86_64: the toolkit's list; aarch64: the list upstream used there (the newest cell's release)."""
    if platform != "aarch64":
        return catalog.cuda[cuda].default_arch_list
    newest = max(Version(c.torch_version) for c in cells)
    release = catalog.release(f"{newest.major}.{newest.minor}")
    return catalog.toolkit_for(release, cuda, platform).default_arch_list


def _capability(arch: str) -> tuple[int, int]:
    major, _, minor = arch.split("+")[0].rstrip("af").partition(".")
    return int(major), int(minor or 0)


def forward_ptx(arch_list: str, newer: set[str], cuda: str) -> tuple[str, str]:
    """A stable build's arch list when the toolkits it serves target newer GPUs than its own: its newest arch
    also as PTX (``9.0+PTX``), which the driver compiles for those GPUs; and the plan's note saying so."""
    archs = walltime.archs(arch_list)
    top = max(archs, key=_capability)
    beyond = sorted({a.split("+")[0] for a in newer if _capability(a) > _capability(top)}, key=_capability)
    if not beyond or any(a.endswith("+PTX") and _capability(a) == _capability(top) for a in archs):
        return arch_list, ""
    changed = ";".join(f"{a}+PTX" if a == top else a for a in archs)
    why = f"abi stable: the CUDA {cuda} build also serves GPUs it cannot compile for ({', '.join(beyond)}): {top}+PTX"
    return changed, why


def right_sized(found: list[walltime.Option], config: FarmConfig, platform: str) -> list[walltime.Option]:
    """Without a record of the source, the smaller instance types (``extension_instances_measured``) only
    where they hold the wall time of the default type with as many shards: cells that cannot use a large
    instance get a smaller one that costs less and takes no longer."""
    small = set(config.extension_instances_measured.get(platform, ()))
    default = config.extension_instances.get(platform, ("",))[0]
    walls = {o.shards: o.wall for o in found if o.instance.name == default}
    return [o for o in found if o.instance.name not in small or o.wall <= walls.get(o.shards, 0.0) + 1e-9]


def plan_extension(
    request: ExtensionRequest,
    catalog: Catalog,
    config: FarmConfig,
    context: StackContext,
    record: Mapping[str, Any] | None = None,
    profile: SourceProfile | None = None,
) -> tuple[tuple[Job, ...], list[str], dict[str, CellCost]]:
    """The request's jobs: each (platform, CUDA toolkit)'s cells on as many instances as the cheapest layout
    meeting ``options.max_wall_hours`` needs (wheelfoundry.planning.walltime); ``record``: this source's recorded
    cells (wheelfoundry.planning.calibration), None for the catalog's model; ``profile``: what the source holds, for
    a first run. Also each job's cell cost (for its sizing note, once its executor is known)."""
    notes: list[str] = []
    source = calibration.source_id({"source_s3": request.source.s3, "source_git": request.source.git,
                                    "source_ref": request.source.ref})  # fmt: skip
    kinds = frozenset(spec != "cpu" for spec in request.cuda)
    one_name = request.local_version or len({stable_kind(c) for c in request.cuda}) == 1  # else names collide
    if (
        request.abi == "auto"
        and one_name
        and (why := calibration.proven_stable(record, oldest_minor(request, catalog), source, kinds))
    ):
        request = dataclasses.replace(request, abi="stable")  # a recorded build of this source proved it
        notes.append(f"abi auto: planned as stable, one build per CUDA major and Python ({why})")
    free = calibration.proven_python_free(record, source) if request.abi == "stable" else None
    if free:  # an abi3 / py3-none wheel: the oldest Python's build serves every Python
        notes.append(f"abi3: one build per CUDA major and platform serves every Python ({free})")
    if request.abi == "stable" and request.abi_build == "newest":
        floor = oldest_minor(request, catalog)
        notes.append(f"abi_build newest: each build compiles against the range's newest torch; its files must set "
                     f"TORCH_TARGET_VERSION to reach torch {floor}, the floor its wheel requires")  # fmt: skip
    groups = []
    for cuda, platform, cells, served in build_groups(request, catalog, one_python=bool(free)):
        if cells:
            arch_list = (request.arch_list or default_arch_list(catalog, cells, cuda, platform)) if cuda else None
            if arch_list and served and not request.arch_list:  # a stable build serves the major's newer toolkits too
                newer = {
                    a
                    for v in {c.cuda for c in served} - {cuda}
                    for a in walltime.archs(catalog.cuda[str(v)].default_arch_list)
                }
                arch_list, note = forward_ptx(arch_list, newer, str(cuda))
                notes += [note] if note else []
            archs = walltime.arch_count(arch_list) if cuda else 1
            cost = cell_cost(bool(cuda), archs, config, record, profile)
            found = walltime.options(len(cells), bool(cuda), archs, cost, platform, request.options.spot, config)
            found = found if cost.recorded else right_sized(found, config, platform)
            found = [o for o in found if o.wall <= request.options.max_hours] or found  # the Build timeout
            groups.append((cuda, platform, cells, arch_list, cost, served, found))
    sizes = [  # each cell wheel's predicted bytes: the layout auto resolves to, by the index's limit
        (c.python, platform, wheel_size.cell_bytes(bool(cuda), arch_list, cost.wheel_bytes)[0])
        for cuda, platform, cells, arch_list, cost, _, _ in groups
        for c in cells
    ]
    request, size_note = wheel_size.resolve_layout(request, sizes)
    rails = config.guardrails
    layout = walltime.choose_layouts(
        [g[-1] for g in groups],
        request.options.max_wall_hours,
        min(rails.max_jobs, rails.max_concurrent_jobs),
        rails.max_instance_hours,
    )
    jobs: list[Job] = []
    costs: dict[str, CellCost] = {}
    for (cuda, platform, cells, arch_list, cost, served, _), chosen in zip(groups, layout.chosen, strict=True):
        start = 0
        for part, size in enumerate(walltime.shard_sizes(len(cells), chosen.shards), start=1):
            shard = cells[start : start + size]
            start += size
            suffix = f"-{part}of{chosen.shards}" if chosen.shards > 1 else ""
            serves = served if free else tuple(c for c in served if c.python in {b.python for b in shard})
            job = _job(
                request, catalog, config, context, cuda, platform, shard, arch_list, cost, chosen, suffix, serves,
                python_free=bool(free),
            )  # fmt: skip
            jobs.append(job)
            costs[job.id] = cost
    notes += [size_note] if size_note else []
    if not layout.met:
        notes.append(
            f"max_wall_hours {request.options.max_wall_hours:g} cannot be met within this stack's guardrails "
            f"({min(rails.max_jobs, rails.max_concurrent_jobs)} jobs at once, {rails.max_instance_hours:g} "
            f"instance-hours): the fastest layout takes {layout.wall:.2f} h"
        )
    return tuple(jobs), notes, costs


def sizing_note(job: Job, cost: CellCost, config: FarmConfig) -> str:
    """How ``job``'s cells share the machine its executor gives them (an EC2 instance or a CodeBuild
    container), what a cell is expected to keep busy, and where the cell's figure came from."""
    ext = job.extension
    assert ext is not None
    cuda, archs, size = bool(job.cuda), walltime.arch_count(job.arch_list), len(ext.cells)
    if job.executor == "codebuild" and job.compute_type:
        compute = next(c for c in config.codebuild.compute_types[job.platform] if c.name == job.compute_type)
        machine = InstanceType(compute.name, compute.arch, compute.vcpus, compute.memory_gib, 0.0)
        where = f"in one CodeBuild {compute.name} build ({compute.vcpus} vCPUs, {compute.memory_gib:g} GiB)"
        config = dataclasses.replace(config, reserve_gib=config.codebuild.reserve_gib)
    else:
        machine = config.instance_types[job.instance.type]
        where = f"on one {machine.name} ({machine.vcpus} vCPUs)"
    slots = walltime.compile_slots(machine, size, cuda, archs, config, cost=cost)
    threads = f", nvcc --threads {slots.threads}" if cuda else ""
    busy = walltime.cores_busy(machine, [size], [slots])
    later = "" if cost.recorded else "; not measured yet: a run records what its cells use, the next plan sizes by it"
    per_job = cost.gib_per_compiler(cuda, config)[0]
    memory = f"; memory {compiler_memory.words(per_job)} a compiler ({cost.memory_source})"
    wheel = f"; a cell wheel ~{cost.wheel_bytes / 1e6:.3g} MB (recorded)" if cost.wheel_bytes is not None else ""
    return (
        f"{job.id}: {size} cell(s) {where}, {slots.cells} at a time, MAX_JOBS {slots.jobs}{threads}; "
        f"expected cores busy {busy:.2f} ({slots.width:g} a cell); {cost.work:.2f} core-h + {cost.serial:.2f} h "
        f"a cell ({cost.source}){later}{memory}{wheel}"
    )


def sizing_reason(job: Job, cost: CellCost, config: FarmConfig) -> str:
    """Why an EC2 extension job has the instance type it has (``plan --explain``)."""
    default = config.extension_instances.get(job.platform, ("",))[0]
    ext = job.extension
    assert ext is not None
    if job.instance.type == default or job.executor != "ec2":
        return ""
    slots = walltime.compile_slots(
        config.instance_types[job.instance.type],
        len(ext.cells),
        bool(job.cuda),
        walltime.arch_count(job.arch_list),
        config,
        cost=cost,
    )
    if job.instance.vcpus < config.instance_types[default].vcpus:
        return (
            f"; instance {job.instance.type}, not {default}: its {len(ext.cells)} cell(s) keep at most "
            f"{slots.width:g} core(s) busy each ({cost.source}), so the smaller instance takes as long for less"
        )
    return (
        f"; instance {job.instance.type}: the cheapest layout that meets max_wall_hours {job.options.max_wall_hours:g}"
    )


def source_version(source: ExtensionSource) -> str:
    """The source's own version where its name says it (an sdist ``name-1.2.3.tar.gz``, a tag ``v1.2.3``)."""
    if source.s3:
        try:
            return str(parse_sdist_filename(source.s3.rsplit("/", 1)[-1])[1])
        except (InvalidSdistFilename, InvalidVersion):
            pass
    if source.ref:
        try:
            return str(Version(source.ref.removeprefix("v")))
        except InvalidVersion:
            pass
    return "from source"


def _job(
    request: ExtensionRequest,
    catalog: Catalog,
    config: FarmConfig,
    context: StackContext,
    cuda: str | None,
    platform: str,
    cells: tuple[CellSpec, ...],
    arch_list: str | None,
    cost: CellCost,
    chosen: walltime.Option,
    suffix: str,
    serves: tuple[CellSpec, ...] = (),
    python_free: bool = False,
) -> Job:
    """One instance's job: ``cells`` of one (platform, toolkit), on the layout's instance type; ``serves``: with
    abi "stable", every cell the built wheels serve (the test jobs' cells), of every Python if ``python_free``."""
    index_url = torch_index_url(request, cuda)
    # A test job's cells span CUDA variants: each cell names its own toolkit and torch index (testjobs); so do
    # the cells a stable build serves (build_groups)
    cells = tuple(dataclasses.replace(c, cuda=cuda, torch_index_url=index_url) for c in cells)
    name, source = normalize(request.name), request.source
    accelerator = "cuda" if cuda else "cpu"
    tid = target_id({"platform": platform, "accelerator": accelerator, "cuda": cuda})
    label = variant(accelerator, cuda)
    instance = choose_instance(f"extension-{platform}", chosen.instance.name, request.options.spot, config)
    slots = walltime.compile_slots(
        chosen.instance, len(cells), bool(cuda), walltime.arch_count(arch_list), config, cost=cost
    )
    scope = buildenv.extension_cache_scope(source)  # one per request: its source's origin
    per_job, per_thread = cost.gib_per_compiler(bool(cuda), config)  # a recorded peak, or the model
    env = {
        **dict(request.build_env),  # the package's own switches; the farm's names below were refused
        "MAX_JOBS": str(max_jobs(instance, accelerator, config, per_job)),
        "WF_GIB_PER_COMPILE_JOB": str(per_job),
        "WF_GIB_PER_NVCC_THREAD": str(per_thread),
        "WF_RESERVE_GIB": str(config.reserve_gib),
        "USE_CUDA": buildenv.flag(bool(cuda)),
        **buildenv.cache_env(context.bucket, context.region, f"ext-{scope}-{tid}", bool(cuda)),
    }
    toolkit_libraries: tuple[str, ...] = ()
    if cuda:
        # torch's CUDA headers need these at compile time; the user's torch brings them at run time
        toolkit_libraries = buildenv.toolkit_requirements(catalog.cuda[cuda].requirements, extension=True)
        env.update({"TORCH_CUDA_ARCH_LIST": arch_list or "", "FORCE_CUDA": "1", "CUDA_VERSION": cuda})
        env["CUDA_HOME"] = buildenv.CUDA_HOME
    if platform == "aarch64":
        env["LDFLAGS"] = buildenv.PAGE_SIZE_FLAG
    ext = ExtensionSpec(
        name=name,
        source_s3=source.s3,
        source_git=source.git,
        source_ref=source.ref,
        subdirectory=source.subdirectory,
        torch_index_url=index_url,
        cells=cells,
        layout=request.layout,
        require_all_cells=request.require_all_cells,
        # auto may fall back to per-cell wheels after the build: every cell wheel gets its label
        # abi stable: local_version false gives the one wheel a public version (PyPI), one kind per request
        label_wheels=request.local_version
        if request.abi == "stable"
        else request.layout != "per-cell" or request.local_version,
        parallel_cells=slots.cells,
        nvcc_threads=slots.threads,
        cell_wheel_bytes=wheel_size.cell_bytes(bool(cuda), arch_list, cost.wheel_bytes)[0],
        cell_wheel_recorded=cost.wheel_bytes is not None,
        test_command=request.test.command if request.test else (),
        test_requires=request.test.requires if request.test else (),
        abi=request.abi,
        abi_oldest=oldest_minor(request, catalog) if request.abi == "stable" else None,
        serves=serves,
        python_free=python_free,
    )
    pythons = tuple(dict.fromkeys(c.python for c in cells))
    # The extension's own version (plan shows it), not torch's: the cells name the torch releases.
    pin = PackagePin(
        name, source_version(source), source.git or source.s3 or "", source.ref or "", "git", None, pythons
    )
    hours = walltime.job_wall(len(cells), cost, slots, config)
    return Job(
        id=f"{name}-{tid}{suffix}",
        kind="extension",
        target=tid,
        platform=platform,
        accelerator=accelerator,
        cuda=cuda,
        arch_list=arch_list,
        variant=label,
        python=pythons,
        packages=(pin,),
        image=buildenv.image_for(platform, cuda, catalog, config, toolkit_libraries),
        instance=instance,
        env=env,
        requirements=(),
        smoke=SmokeSpec(mpi=False, mkldnn=False, cuda_built=bool(cuda)),
        options=request.options,
        estimate=Estimate(round(hours, 2), round(hours * ec2_usd_per_hour(instance, config), 2)),
        extension=ext,
    )
