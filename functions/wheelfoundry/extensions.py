"""Plan a user's torch extension across torch x CUDA x platform (Python versions in sequence)."""

from __future__ import annotations

import re

from packaging.version import Version

from wheelfoundry import buildenv
from wheelfoundry.catalog import Catalog
from wheelfoundry.config import FarmConfig
from wheelfoundry.jobs import ExtensionSpec, Job, PackagePin, SmokeSpec, StackContext
from wheelfoundry.model import ExtensionRequest
from wheelfoundry.resolve import resolve_version
from wheelfoundry.sizing import choose_instance, estimate, max_jobs
from wheelfoundry.targets import target_id, variant

TORCH_INDEX = "https://download.pytorch.org/whl/{variant}"


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def plan_extension(
    request: ExtensionRequest, catalog: Catalog, config: FarmConfig, context: StackContext
) -> tuple[tuple[Job, ...], list[str]]:
    jobs: list[Job] = []
    notes: list[str] = []
    name = normalize(request.name)
    for spec in request.torch:
        resolved = resolve_version(spec, catalog)
        torch_version = resolved.torch_version or spec
        parsed = Version(torch_version)
        pythons = tuple(p for p in request.python if p in resolved.python)
        for cuda_spec in request.cuda:
            cuda = None if cuda_spec == "cpu" else cuda_spec
            accelerator = "cuda" if cuda else "cpu"
            for platform in request.platforms:
                tid = target_id({"platform": platform, "accelerator": accelerator, "cuda": cuda})
                label = variant(accelerator, cuda)
                instance = choose_instance(f"extension-{platform}", None, request.options.spot, config)
                env = {
                    "MAX_JOBS": str(max_jobs(instance, accelerator, config)),
                    "USE_CUDA": buildenv.flag(bool(cuda)),
                    **buildenv.cache_env(context.bucket, context.region, f"ext-{tid}", bool(cuda)),
                }
                arch_list = None
                if cuda:
                    arch_list = request.arch_list or catalog.cuda[cuda].default_arch_list
                    env.update({"TORCH_CUDA_ARCH_LIST": arch_list, "FORCE_CUDA": "1", "CUDA_VERSION": cuda})
                    env["CUDA_HOME"] = buildenv.CUDA_HOME
                if platform == "aarch64":
                    env["LDFLAGS"] = buildenv.PAGE_SIZE_FLAG
                source = request.source
                ext = ExtensionSpec(
                    name=name,
                    source_s3=source.s3,
                    source_git=source.git,
                    source_ref=source.ref,
                    subdirectory=source.subdirectory,
                    torch_version=torch_version,
                    torch_index_url=TORCH_INDEX.format(variant=label) if request.torch_index == "pytorch" else None,
                    local_label=f"pt{parsed.major}{parsed.minor}{label}" if request.local_version else None,
                )
                pin = PackagePin(
                    name, torch_version, source.git or source.s3 or "", source.ref or "", "git", None, pythons
                )
                hours = config.estimates["setup"] + config.estimates["extension_per_python"][accelerator] * len(pythons)
                jobs.append(
                    Job(
                        id=f"{name}-torch{torch_version}-{tid}",
                        kind="extension",
                        target=tid,
                        platform=platform,
                        accelerator=accelerator,
                        cuda=cuda,
                        arch_list=arch_list,
                        variant=label,
                        python=pythons,
                        packages=(pin,),
                        image=buildenv.image_for(platform, cuda, catalog, config),
                        instance=instance,
                        env=env,
                        requirements=(),
                        smoke=SmokeSpec(mpi=False, mkldnn=False, cuda_built=bool(cuda)),
                        options=request.options,
                        estimate=estimate(hours, instance, config),
                        extension=ext,
                    )
                )
    return tuple(jobs), notes
