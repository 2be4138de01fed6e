"""Which compiled GPU code runs on which GPU, and whether a build holds code for every requested arch.

Standard library only, and free of package imports: wfbuild.gpu.gpu_probe loads this file by its path inside
a GPU test venv. The rule is NVIDIA's, from the CUDA C++ Programming Guide
(https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#binary-compatibility and
#ptx-compatibility, "Binary Compatibility" / "PTX Compatibility"; the arch- and family-specific
targets in its "Feature Availability" section, and NVIDIA's "NVIDIA Blackwell and NVIDIA CUDA 12.9
Introduce Family-Specific Architecture Features", https://developer.nvidia.com/blog/):

- SASS (a cubin) for X.y runs on a GPU of compute capability X.z with z >= y, never on another major.
  So SASS of the same major and a lower minor COUNTS for a requested X.z: sm_80 serves 8.6 (the GPU
  runs it, as NVIDIA guarantees), sm_80 never serves 9.0.
- Arch-specific code ('a': sm_90a, compute_100a) runs on X.y itself and nowhere else, SASS or PTX.
- Family-specific code ('f': sm_100f, compute_100f) runs within its family: the same major, z >= y.
- PTX for compute_XY (not 'a', not 'f') is JIT-compiled by the driver for any GPU of capability >= X.Y.

A requested arch is the GPU of that capability: "9.0a" asks for code a 9.0 GPU runs (sm_90 serves it too:
the GPU runs it, if without the 'a' features). "X.Y+PTX" also asks for PTX that every GPU from X.Y on
can JIT: a plain compute_AB with AB <= XY. Tegra's exceptions (no binary compatibility) are not modelled:
the farm builds for x86_64 and server aarch64.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

ARCH_ITEM = re.compile(r"(\d{1,2})\.(\d)([af]?)(\+PTX)?")


@dataclass(frozen=True, order=True)
class Code:
    """One piece of device code: SASS for an sm, or PTX for a virtual compute arch."""

    kind: str  # "sass" | "ptx"
    major: int
    minor: int
    variant: str = ""  # "" | "a" (arch-specific) | "f" (family-specific)

    @property
    def name(self) -> str:
        return f"{'sm' if self.kind == 'sass' else 'compute'}_{self.major}{self.minor}{self.variant}"

    @classmethod
    def parse(cls, name: str) -> Code:
        """``sm_90a`` / ``compute_90`` -> Code (the last digit is the minor: sm_100 is 10.0, sm_120 is 12.0)."""
        match = re.fullmatch(r"(sm|compute)_(\d{2,3})([af]?)", name)
        if not match:
            raise ValueError(f"not an sm_XY or compute_XY name: {name!r}")
        number = int(match[2])
        return cls("sass" if match[1] == "sm" else "ptx", number // 10, number % 10, match[3])


@dataclass(frozen=True)
class Requested:
    major: int
    minor: int
    variant: str
    ptx: bool

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}{self.variant}{'+PTX' if self.ptx else ''}"


def parse_arch_list(arch_list: str) -> list[Requested]:
    """TORCH_CUDA_ARCH_LIST as Validate accepts it: '8.0;9.0a;12.0+PTX' (';', ',' or spaces between)."""
    out = []
    for item in filter(None, re.split(r"[;,\s]+", arch_list.strip())):
        match = ARCH_ITEM.fullmatch(item)
        if not match:
            raise ValueError(f"not a CUDA arch: {item!r} (expected e.g. 9.0, 9.0a, 10.0f or 12.0+PTX)")
        out.append(Requested(int(match[1]), int(match[2]), match[3], bool(match[4])))
    return out


def runs_on(code: Code, capability: tuple[int, int]) -> bool:
    """Whether a GPU of ``capability`` runs ``code`` (directly, or through the driver's PTX JIT)."""
    arch = (code.major, code.minor)
    if code.variant == "a":
        return arch == capability
    if code.kind == "sass" or code.variant == "f":
        return code.major == capability[0] and code.minor <= capability[1]
    return arch <= capability


def forward_ptx(code: Code, capability: tuple[int, int]) -> bool:
    """PTX that the GPU of ``capability`` and every later one can JIT (what "+PTX" asks for)."""
    return code.kind == "ptx" and not code.variant and (code.major, code.minor) <= capability


def serving(want: Requested, codes: Iterable[Code]) -> list[Code]:
    """The codes a GPU of the requested capability runs; empty when a "+PTX" request finds no forward PTX."""
    capability = (want.major, want.minor)
    found = sorted(c for c in set(codes) if runs_on(c, capability))
    if want.ptx and not any(forward_ptx(c, capability) for c in found):
        return []
    return found


def missing(arch_list: str, codes: Iterable[Code]) -> list[Requested]:
    """The requested archs that ``codes`` hold no code for (a "+PTX" one also needs its forward PTX)."""
    held = set(codes)
    return [want for want in parse_arch_list(arch_list) if not serving(want, held)]


def covers(codes: Iterable[Code], capability: tuple[int, int]) -> bool:
    return any(runs_on(c, capability) for c in codes)


def codes_of_arch_list(arch_list: str) -> list[Code]:
    """What a build that honours ``arch_list`` holds, as torch.utils.cpp_extension compiles it: SASS per
    entry, plus PTX of the entry's own arch for "+PTX"."""
    out = []
    for want in parse_arch_list(arch_list):
        out.append(Code("sass", want.major, want.minor, want.variant))
        if want.ptx:
            out.append(Code("ptx", want.major, want.minor, want.variant))
    return out
