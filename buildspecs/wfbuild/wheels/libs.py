"""Which shared libraries a wheel bundles, and which it leaves to other wheels.

Slim CUDA wheels take the CUDA libraries from PyPI's ``nvidia-*`` wheels and torch extensions take
torch's libraries from the installed torch, so ``auditwheel repair`` must not graft them
(``--exclude``); the wheel finds them at run time through RPATH (torch) or because torch loaded
them first (extensions, domain libraries).
"""

from __future__ import annotations

import re

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# torch's own libraries: an extension links them, but they belong to the installed torch.
TORCH_LIBS = ("libtorch*.so*", "libc10*.so*", "libshm*.so*")

# The NVIDIA driver's libraries: the user's machine has them, matching its kernel module; a copy in a wheel
# would shadow it (and fail on any other driver). A build links the toolkit's stub (lib64/stubs/libcuda.so,
# SONAME libcuda.so.1), and auditwheel would graft whatever libcuda.so.1 a host with a driver has: every job
# excludes them, CPU ones too (a host-mode CPU cell can find a host's driver).
DRIVER_LIBS = ("libcuda.so*", "libnvidia-ml.so*")

# The toolkit's libraries: from the nvidia-* wheels, never bundled.
CUDA_LIBS = (
    *DRIVER_LIBS,
    "libcudart.so*",
    "libcublas*.so*",
    "libcudnn*.so*",
    "libnccl*.so*",
    "libcufft*.so*",
    "libcufile*.so*",
    "libcurand*.so*",
    "libcusolver*.so*",
    "libcusparse*.so*",
    "libcupti*.so*",
    "libnvJitLink*.so*",
    "libnvrtc*.so*",
    "libnvToolsExt*.so*",
    "libnvshmem*.so*",
    "libnvperf*.so*",
)

_NVIDIA = re.compile(r"^nvidia-(?P<stem>[a-z0-9-]+?)(-cu(?P<major>[0-9]+))?$")


def nvidia_rpaths(requirements: list[str] | tuple[str, ...], cuda: str | None) -> list[str]:
    """RPATH entries of torch/lib/*.so that find the nvidia-* wheels' libraries in site-packages.

    ``nvidia-cublas-cu12`` installs ``nvidia/cublas/lib``; the CUDA 13 wheels without a ``-cuNN``
    suffix share ``nvidia/cu13/lib`` (.ci/manywheel/build_cuda.sh sets the same list).
    """
    major = cuda.split(".", 1)[0] if cuda else ""
    dirs: list[str] = []
    for text in requirements:
        name = str(canonicalize_name(Requirement(text).name))
        match = _NVIDIA.match(name)
        if name == "cuda-toolkit" and major:  # the CUDA 13 metapackage (torch 2.14): its wheels share cuNN
            sub = f"cu{major}"
        elif match is None:
            continue
        elif match["major"]:
            sub = match["stem"].replace("-", "_")
        elif major:
            sub = f"cu{major}"
        else:
            continue
        entry = f"$ORIGIN/../../nvidia/{sub}/lib"
        if entry not in dirs:
            dirs.append(entry)
    return dirs
