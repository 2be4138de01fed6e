"""Image jobs: one runtime image per (platform, variant, torch, Python) of a run with an ``image`` section.

They run after PublishIndex, on CodeBuild in privileged mode (``docker build`` and push), and install
the run's wheels from the index with ``pip install --require-hashes`` (buildspecs/images/runtime).
``ImageJob.to_dict()`` is the image contract, stored as ``runs/<run>/images/<id>/image.json``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from wheelfoundry.config import FarmConfig
from wheelfoundry.errors import Issue
from wheelfoundry.planning.jobs import Estimate, Job
from wheelfoundry.request.model import ImageWheel, Request, RuntimeImage

IMAGE_SCHEMA = 1
PYTHON_BASE = "python:{python}-slim-bookworm"  # buildspecs/images/base-images.lock pins each by digest
PYTORCH_INDEX = "https://download.pytorch.org/whl"
CUDA_BASE = "nvidia/cuda:{cuda}-runtime-ubuntu24.04"
CUDA_RUNTIME_TAGS = {"12.6": "12.6.3", "12.8": "12.8.1", "12.9": "12.9.1", "13.0": "13.0.1"}
# Minutes on CodeBuild: pull the base, install the wheels (a CUDA torch pulls ~3 GB of nvidia-* wheels),
# image tests, push. Measured figures replace these once the image job has run on AWS.
MINUTES = {"cpu": 10, "cuda": 25}
COMPUTE_TYPE = "BUILD_GENERAL1_MEDIUM"  # 4 vCPU, 7-8 GiB, 128 GB disk: pip and docker, no compiler


@dataclass(frozen=True)
class ImageJob:
    id: str  # image-torch2.5.1-cu124-py3.12-x86_64
    platform: str
    variant: str  # cpu, cu124
    cuda: str | None
    torch: str  # the torch version the image holds
    python: str
    recipe: Literal["runtime/slim", "runtime/cuda"]  # buildspecs/images/<recipe>.Dockerfile
    base: str  # reference; the image job pins it by digest from base-images.lock
    python_image: str  # the Python the image runs (the base itself for slim)
    wheels: tuple[ImageWheel, ...]  # from the index, installed with the index's sha256
    pip: tuple[str, ...]
    uid: int
    gid: int
    user: str
    tz: str
    arch_list: str | None  # TORCH_CUDA_ARCH_LIST in the image
    tag: str  # {run} is filled in by Validate (the run id is not known to the planner)
    compute_type: str
    estimate: Estimate
    executor: Literal["codebuild"] = "codebuild"
    # The one index the wheels' own dependencies (and ``pip``) are resolved from, sha256s trusted on
    # first use (wfbuild.images.upstream_lock); None: the build host's pip configuration.
    upstream_index: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["schema"] = IMAGE_SCHEMA
        return data


Variant = tuple[str, str, str | None, str, str]  # platform, variant, cuda, torch, python


def _variants(request: Request, jobs: tuple[Job, ...]) -> dict[Variant, tuple[tuple[ImageWheel, ...], str | None]]:
    """Every build of the run (in plan order) with the run's wheels for it (the default ``wheels``) and
    the arch list it was built for (the image's TORCH_CUDA_ARCH_LIST unless gpu_cc says otherwise)."""
    seen: dict[Variant, tuple[tuple[ImageWheel, ...], str | None]] = {}
    for job in jobs:
        if job.extension is not None:
            for cell in job.extension.cells:
                name = request.name if request.framework == "extension" else job.extension.name
                seen[(job.platform, job.variant, job.cuda, cell.torch_version, cell.python)] = (
                    (ImageWheel(name),),
                    job.arch_list,
                )
            continue
        torch = next((p for p in job.packages if p.name == "torch"), None)
        for py in torch.python if torch else job.python:
            wheels = tuple(ImageWheel(p.name) for p in job.packages if py in p.python)
            seen[(job.platform, job.variant, job.cuda, torch.version if torch else "", py)] = (wheels, job.arch_list)
    return seen


def _upstream(request: Request, variant: str) -> str | None:
    """PyTorch's index of the variant: it serves torch and mirrors what torch needs (nvidia-*, sympy, ...)."""
    if request.framework == "extension" and request.torch_index == "pip":
        return None
    return f"{PYTORCH_INDEX}/{variant}"


def _tag_safe(text: str) -> str:
    """A branch name like release/2.5 in a tag: anything outside A-Z a-z 0-9 _ . - becomes '-'."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)


def _estimate(kind: str, platform: str, config: FarmConfig) -> Estimate:
    minutes = MINUTES[kind]
    types = config.codebuild.compute_types.get(platform, ())
    price = next((t.usd_per_minute for t in types if t.name == COMPUTE_TYPE), 0.0)
    return Estimate(hours=round(minutes / 60, 2), usd=round(math.ceil(minutes) * price, 2))


def plan_images(request: Request, jobs: tuple[Job, ...], config: FarmConfig) -> tuple[ImageJob, ...]:
    image: RuntimeImage | None = request.image
    if image is None:
        return ()
    out = []
    for (platform, variant, cuda, torch, python), (run_wheels, built_for) in _variants(request, jobs).items():
        if image.cuda is not None and (cuda or "cpu") not in image.cuda:
            continue
        if image.python is not None and python not in image.python:
            continue
        use_cuda = image.base == "cuda" and cuda is not None
        python_image = PYTHON_BASE.format(python=python)
        base = CUDA_BASE.format(cuda=CUDA_RUNTIME_TAGS.get(cuda or "", cuda)) if use_cuda else python_image
        fields = {"torch": torch, "variant": variant, "python": python, "platform": platform}
        out.append(
            ImageJob(
                id=f"image-torch{torch}-{variant}-py{python}-{platform}",
                platform=platform,
                variant=variant,
                cuda=cuda,
                torch=torch,
                python=python,
                recipe="runtime/cuda" if use_cuda else "runtime/slim",
                base=base,
                python_image=python_image,
                wheels=image.wheels or run_wheels,
                pip=image.pip,
                uid=image.uid,
                gid=image.gid,
                user=image.user,
                tz=image.tz,
                arch_list=(image.gpu_cc or built_for) if cuda else None,
                tag=image.tag.replace("{run}", "{{run}}").format(**{k: _tag_safe(v) for k, v in fields.items()}),
                compute_type=COMPUTE_TYPE,
                estimate=_estimate("cuda" if cuda else "cpu", platform, config),
                upstream_index=_upstream(request, variant),
            )
        )
    return tuple(out)


def guardrail_issues(jobs: tuple[Job, ...], images: tuple[ImageJob, ...], config: FarmConfig) -> list[Issue]:
    """Image jobs count against the same per-request job limit as build jobs."""
    limit = config.guardrails.max_jobs
    total = len(jobs) + len(images)
    if images and total > limit:
        message = f"{len(jobs)} build jobs and {len(images)} image jobs exceed this stack's limit of {limit}"
        return [Issue("image", message, total, (f"<= {limit} jobs", "image.python", "image.cuda"))]
    return []
