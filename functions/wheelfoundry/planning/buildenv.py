"""The environment contract: the variables PyTorch's build reads, derived from the job.

These are the variables PyTorch's own binary builders set (.ci/manywheel/build_cuda.sh,
.ci/aarch64_linux/aarch64_wheel_ci_build.py); the build scripts pass them through untouched.
"""

from __future__ import annotations

import hashlib
import re

from wheelfoundry.catalog.catalog import Catalog
from wheelfoundry.catalog.resolve import Resolved
from wheelfoundry.config import FarmConfig
from wheelfoundry.planning.jobs import ImageSpec, StackContext
from wheelfoundry.request.model import ExtensionSource, Options, TargetSpec

PAGE_SIZE_FLAG = "-Wl,-z,max-page-size=0x10000"  # aarch64 kernels with 64 KiB pages
CUDA_HOME = "/usr/local/cuda"  # where the CUDA builder images (and NVIDIA's installers) put the toolkit
NEWEST_GCC_TOOLSET = 14  # AlmaLinux 8 (manylinux_2_28) ships gcc-toolset-11 .. 14
# Libraries only a torch build links: an extension cell compiles against torch's headers, which pull in
# cuBLAS, cuSPARSE, cuSOLVER (ATen/cuda/CUDAContext.h), cuRAND, cuFFT and NVTX, but never these.
FRAMEWORK_ONLY = ("cudnn", "nccl", "nvshmem", "cusparselt", "cufile", "cudss")


def flag(value: bool) -> str:
    return "1" if value else "0"


def extension_cache_scope(source: ExtensionSource) -> str:
    """Which extension builds share a compiler cache: those of one source origin, nothing wider.

    git: the repository (a named ref shares it; a bare commit id, which a fork can supply through the
    parent's URL, gets a scope of its own); s3: the source's name in its folder (the CLI's uploads differ
    only in their content hash), so whoever could poison it could replace the source itself.
    """
    if source.git:
        url = source.git.strip().rstrip("/").removesuffix(".git").lower()
        ref = source.ref or "HEAD"
        origin = f"{url}@{ref}" if re.fullmatch(r"[0-9a-f]{7,40}", ref) else url
    else:
        where = source.s3 or ""
        folder, _, name = where.rpartition("/")
        stem = re.sub(r"\.(tar\.gz|tgz|zip)$", "", name)
        origin = f"{folder}/{re.sub(r'-[0-9a-f]{8,64}$', '', stem)}"
    return hashlib.sha256(origin.encode()).hexdigest()[:16]


def cache_env(bucket: str, region: str, target: str, cuda: bool) -> dict[str, str]:
    env = {
        "CMAKE_C_COMPILER_LAUNCHER": "sccache",
        "CMAKE_CXX_COMPILER_LAUNCHER": "sccache",
        "SCCACHE_BUCKET": bucket,
        "SCCACHE_REGION": region,
        "SCCACHE_S3_KEY_PREFIX": f"sccache/{target}/",
        "SCCACHE_S3_SERVER_SIDE_ENCRYPTION": "true",
    }
    if cuda:
        env["CMAKE_CUDA_COMPILER_LAUNCHER"] = "sccache"
    return env


def uses_acl(target: TargetSpec) -> bool:
    """aarch64 oneDNN's Arm Compute Library backend: follows mkldnn unless acl is given."""
    return target.platform == "aarch64" and bool(target.mkldnn if target.acl is None else target.acl)


def torch_env(
    target: TargetSpec,
    resolved: Resolved,
    options: Options,
    arch_list: str | None,
    max_jobs: int,
    context: StackContext,
    target_id: str,
) -> dict[str, str]:
    cuda = target.accelerator == "cuda"
    env = {
        "BUILD_TEST": "0",
        "USE_DISTRIBUTED": "1",
        "USE_MPI": flag(options.mpi),
        "USE_OPENMP": "1",
        "MAX_JOBS": str(max_jobs),
        "PYTORCH_BUILD_NUMBER": "1",
        "_GLIBCXX_USE_CXX11_ABI": flag(resolved.cxx11_abi),
        "USE_MKLDNN": flag(bool(target.mkldnn)),  # planning put the release's default in place of None
        "USE_CUDA": flag(cuda),
        **cache_env(context.bucket, context.region, target_id, cuda),
    }
    if target.platform == "aarch64":
        acl = uses_acl(target)
        env.update(
            {
                "BLAS": "OpenBLAS",
                "OpenBLAS_HOME": "/opt/OpenBLAS",
                "USE_MKLDNN_ACL": flag(acl),
                "CMAKE_SHARED_LINKER_FLAGS": PAGE_SIZE_FLAG,
                "LDFLAGS": PAGE_SIZE_FLAG,
            }
        )
        if acl:
            env.update({"ACL_ROOT_DIR": "/acl", "ACL_INCLUDE_DIR": "/acl/build", "ACL_LIBRARY": "/acl/build"})
    else:
        env["BLAS"] = "MKL"
    if cuda and target.cuda and arch_list:
        env.update(
            {
                "CUDA_VERSION": target.cuda,
                "CUDA_HOME": CUDA_HOME,
                "TORCH_CUDA_ARCH_LIST": arch_list,
                "TORCH_NVCC_FLAGS": "-Xfatbin -compress-all",
                # Slim wheel: CUDA libraries come from the nvidia-* wheels, found through RPATH.
                "USE_STATIC_CUDNN": "0",
                "USE_SYSTEM_NCCL": "1",
                "USE_STATIC_NCCL": "0",
                "ATEN_STATIC_CUDA": "0",
                "USE_CUDA_STATIC_LINK": "0",
                "USE_CUPTI_SO": "1",
            }
        )
    return env


def library_env(name: str, accelerator: str) -> dict[str, str]:
    """Each domain library's own switches; optional system codecs stay off for portable wheels."""
    cuda = accelerator == "cuda"
    if name == "torchvision":
        return {
            "TORCHVISION_USE_PNG": "1",
            "TORCHVISION_USE_JPEG": "1",
            "TORCHVISION_USE_WEBP": "1",
            "TORCHVISION_USE_NVJPEG": flag(cuda),
            "TORCHVISION_USE_FFMPEG": "0",
            "TORCHVISION_USE_VIDEO_CODEC": "0",
            "FORCE_CUDA": flag(cuda),
        }
    if name == "torchaudio":
        return {"USE_CUDA": flag(cuda), "USE_FFMPEG": "0", "BUILD_SOX": "0", "USE_OPENMP": "1"}
    return {}


def toolkit_requirements(lines: tuple[str, ...], extension: bool = False) -> tuple[str, ...]:
    """The lines of a slim wheel's Requires-Dist that are CUDA toolkit parts (nvidia-*, cuda-toolkit):
    what the builder's toolkit lock installs to compile against. An extension leaves out FRAMEWORK_ONLY."""
    # Only CUDA jobs get here: the requirement parser is packaging's slowest import (plan's start-up).
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    found = []
    for line in lines:
        try:
            name = canonicalize_name(Requirement(line).name)
        except InvalidRequirement:
            continue
        if not (name.startswith("nvidia-") or name == "cuda-toolkit"):
            continue
        if extension and any(part in name for part in FRAMEWORK_ONLY):
            continue
        found.append(line)
    return tuple(found)


def image_for(
    platform: str, cuda: str | None, catalog: Catalog, config: FarmConfig, cuda_requirements: tuple[str, ...] = ()
) -> ImageSpec:
    """The builder image: the pinned manylinux_2_28 base of the platform, plus (CUDA) a toolkit assembled
    from the lock of (CUDA version, platform) with the libraries ``cuda_requirements`` name."""
    tools = config.toolchain
    args = {"OPENMPI_VERSION": tools["openmpi"], "SCCACHE_VERSION": tools["sccache"]}
    manylinux = f"manylinux_2_28_{platform}"
    if platform == "aarch64":
        args.update({"OPENBLAS_VERSION": tools["openblas"], "ACL_VERSION": tools["acl"]})
    if cuda:
        toolkit = catalog.cuda[cuda]
        args |= {
            "CUDA_VERSION": cuda,
            "GCC_TOOLSET": str(min(toolkit.gcc_max or NEWEST_GCC_TOOLSET, NEWEST_GCC_TOOLSET)),
            "CUDA_REQUIREMENTS": "\n".join(toolkit_requirements(cuda_requirements)),
        }
    recipe = f"{platform}-{'cuda' if cuda else 'cpu'}"
    return ImageSpec(recipe, tools[f"manylinux_{platform}"], args, manylinux)
