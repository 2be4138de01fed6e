"""Plan a user's torch extension: cells (torch x CUDA x Python x platform) packed onto shared hosts.

Cells that can share a builder image (same platform and CUDA toolkit; any torch and Python) form
one job: one instance builds them in parallel, each cell in its own build environment, with the
instance's compile jobs split between the cells that run at once (``parallel_cells``). So 3 torch
x 2 CUDA x 3 Python is 2 jobs (one per CUDA toolkit), not 18.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from packaging.version import Version

from wheelfoundry import buildenv
from wheelfoundry.catalog import Catalog
from wheelfoundry.config import FarmConfig
from wheelfoundry.jobs import CellSpec, ExtensionSpec, InstanceChoice, Job, PackagePin, SmokeSpec, StackContext
from wheelfoundry.model import ExtensionRequest
from wheelfoundry.resolve import resolve_version
from wheelfoundry.sizing import choose_instance, estimate, max_jobs
from wheelfoundry.targets import target_id, variant
from wheelfoundry.usage import RecordedUsage, expected_busy, size_extension, usage_key

TORCH_INDEX = "https://download.pytorch.org/whl/{variant}"


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parallel_cells(cells: int, instance: InstanceChoice, accelerator: str, config: FarmConfig) -> int:
    """Cells built at once: never more than the cores, nor more than memory holds at one compile job each."""
    per_job = config.gib_per_compile_job["cuda" if accelerator == "cuda" else "cpu"]
    by_memory = math.floor((instance.memory_gib - config.reserve_gib) / per_job)
    return max(1, min(cells, instance.vcpus, by_memory))


def cells_for(request: ExtensionRequest, catalog: Catalog, cuda: str | None, platform: str) -> tuple[CellSpec, ...]:
    """The cells of one (platform, CUDA toolkit): every torch release x the Pythons it supports."""
    accelerator = "cuda" if cuda else "cpu"
    label = variant(accelerator, cuda)
    tid = target_id({"platform": platform, "accelerator": accelerator, "cuda": cuda})
    cells = []
    for spec in request.torch:
        resolved = resolve_version(spec, catalog)
        torch_version = resolved.torch_version or spec
        parsed = Version(torch_version)
        for python in (p for p in request.python if p in resolved.python):
            cells.append(
                CellSpec(
                    id=f"torch{torch_version}-cp{python.replace('.', '')}-{tid}",
                    torch_version=torch_version,
                    python=python,
                    local_label=f"pt{parsed.major}{parsed.minor}{label}",
                    build_id=f"torch{parsed.major}.{parsed.minor}-{label}",
                )
            )
    return tuple(cells)


def default_arch_list(catalog: Catalog, cells: tuple[CellSpec, ...], cuda: str, platform: str) -> str:
    """x86_64: the toolkit's list; aarch64: the list upstream used there (the newest cell's release)."""
    if platform != "aarch64":
        return catalog.cuda[cuda].default_arch_list
    newest = max(Version(c.torch_version) for c in cells)
    release = catalog.release(f"{newest.major}.{newest.minor}")
    return catalog.toolkit_for(release, cuda, platform).default_arch_list


def _sized(
    job_id: str, cells: int, default: InstanceChoice, accelerator: str, config: FarmConfig, record: RecordedUsage | None
) -> tuple[InstanceChoice, int, float | None, str]:
    """(instance, cells at once, compile hours on it or None for the config's model, the plan's note)."""
    if record is None:
        per_cell = float(config.estimates["extension_cores_per_cell"][accelerator])
        busy = expected_busy(cells, default.vcpus, per_cell)
        note = (
            f"{job_id}: expected cores busy {busy:.2f} of {default.vcpus} vCPUs ({cells} cell(s) x {per_cell:g} "
            f"from the config): no recorded build of this source; each cell compiles up to MAX_JOBS units at once "
            f"(ninja, CMake, or setuptools without ninja), so a run's manifest (`plan --usage`) can size it"
        )
        return default, parallel_cells(cells, default, accelerator, config), None, note
    sized = size_extension(cells, record, default.arch, accelerator, config, default.spot)
    spec = sized.instance
    instance = InstanceChoice(spec.name, spec.arch, spec.vcpus, spec.memory_gib, spec.usd_per_hour, default.spot)
    note = f"{job_id}: {spec.name}, expected cores busy {sized.cores_busy:.2f}: {sized.reason}"
    return instance, sized.parallel_cells, sized.wall_hours, note


def plan_extension(
    request: ExtensionRequest,
    catalog: Catalog,
    config: FarmConfig,
    context: StackContext,
    usage: Mapping[str, RecordedUsage] | None = None,
) -> tuple[tuple[Job, ...], list[str]]:
    jobs: list[Job] = []
    notes: list[str] = []
    name = normalize(request.name)
    source = request.source
    scope = buildenv.extension_cache_scope(source)  # one per request: its source's origin
    for cuda_spec in request.cuda:
        cuda = None if cuda_spec == "cpu" else cuda_spec
        accelerator = "cuda" if cuda else "cpu"
        for platform in request.platforms:
            cells = cells_for(request, catalog, cuda, platform)
            if not cells:
                continue
            tid = target_id({"platform": platform, "accelerator": accelerator, "cuda": cuda})
            label = variant(accelerator, cuda)
            default = choose_instance(f"extension-{platform}", None, request.options.spot, config)
            key = usage_key(name, source.git or source.s3 or "", source.ref or "", tid)
            instance, parallel, sized_hours, busy_note = _sized(
                f"{name}-{tid}", len(cells), default, accelerator, config, (usage or {}).get(key)
            )
            per_job = config.gib_per_compile_job["cuda" if accelerator == "cuda" else "cpu"]
            env = {
                "MAX_JOBS": str(max_jobs(instance, accelerator, config)),
                "WF_GIB_PER_COMPILE_JOB": str(per_job),
                "WF_RESERVE_GIB": str(config.reserve_gib),
                "USE_CUDA": buildenv.flag(bool(cuda)),
                **buildenv.cache_env(context.bucket, context.region, f"ext-{scope}-{tid}", bool(cuda)),
            }
            arch_list = None
            toolkit_libraries: tuple[str, ...] = ()
            if cuda:
                # torch's CUDA headers need these at compile time; the user's torch brings them at run time
                toolkit_libraries = buildenv.toolkit_requirements(catalog.cuda[cuda].requirements, extension=True)
                arch_list = request.arch_list or default_arch_list(catalog, cells, cuda, platform)
                env.update({"TORCH_CUDA_ARCH_LIST": arch_list, "FORCE_CUDA": "1", "CUDA_VERSION": cuda})
                env["CUDA_HOME"] = buildenv.CUDA_HOME
            if platform == "aarch64":
                env["LDFLAGS"] = buildenv.PAGE_SIZE_FLAG
            ext = ExtensionSpec(
                name=name,
                source_s3=source.s3,
                source_git=source.git,
                source_ref=source.ref,
                subdirectory=source.subdirectory,
                torch_index_url=TORCH_INDEX.format(variant=label) if request.torch_index == "pytorch" else None,
                cells=cells,
                layout=request.layout,
                require_all_cells=request.require_all_cells,
                label_wheels=request.layout == "merged" or request.local_version,
                parallel_cells=parallel,
            )
            pythons = tuple(dict.fromkeys(c.python for c in cells))
            versions = ",".join(dict.fromkeys(c.torch_version for c in cells))
            pin = PackagePin(name, versions, source.git or source.s3 or "", source.ref or "", "git", None, pythons)
            per_cell = config.estimates["extension_per_python"][accelerator]
            hours = config.estimates["setup"] + per_cell * len(cells)
            if sized_hours is not None:  # hours on this instance, from the record: as hours on the 32-vCPU reference
                hours = sized_hours * instance.vcpus / 32
            jobs.append(
                Job(
                    id=f"{name}-{tid}",
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
                    estimate=estimate(hours, instance, config),
                    extension=ext,
                )
            )
            notes.append(f"{name}-{tid}: {len(cells)} cell(s) on one {instance.type}, {parallel} at a time")
            notes.append(busy_note)
    return tuple(jobs), notes
