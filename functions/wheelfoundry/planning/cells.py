"""An extension request's cells (torch x CUDA x Python x platform) and how they group into builds.

Per torch (the default): every cell is built, each (platform, CUDA toolkit)'s cells by one job's toolkit. abi
"stable" (LibTorch's stable ABI, issue 66): per (CUDA major, platform) one cell per Python is built, against the
range's oldest torch with the request's oldest toolkit of that major; its wheel serves, and the test jobs install
it into, every cell of the range (``build_groups``).
"""

from __future__ import annotations

import dataclasses

from packaging.version import Version

from wheelfoundry.catalog.catalog import Catalog
from wheelfoundry.catalog.resolve import resolve_version
from wheelfoundry.planning.jobs import CellSpec
from wheelfoundry.request import exclusions
from wheelfoundry.request.model import ExtensionRequest
from wheelfoundry.request.targets import target_id, variant

TORCH_INDEX = "https://download.pytorch.org/whl/{variant}"


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
            if exclusions.excluded(request.exclude, torch=spec, cuda=cuda or "cpu", python=python, platform=platform):
                continue
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


Group = tuple[str | None, str, tuple[CellSpec, ...], tuple[CellSpec, ...]]


def build_groups(request: ExtensionRequest, catalog: Catalog) -> list[Group]:
    """(CUDA or None, platform, cells to build, cells their wheels serve) per group of one job's toolkit. abi
    "stable": one group per (CUDA major, platform), built with the request's oldest toolkit of that major (a
    cu126 build runs on 12.8's runtime too) against the range's oldest torch; its wheels serve every cell of
    that major, each with its own CUDA and torch index (the test jobs' environments)."""
    found = [
        (
            None if spec == "cpu" else spec,
            platform,
            cells_for(request, catalog, None if spec == "cpu" else spec, platform),
        )
        for spec in request.cuda
        for platform in request.platforms
    ]
    if request.abi != "stable":
        return [(cuda, platform, cells, ()) for cuda, platform, cells in found]
    majors: dict[tuple[str, str], list[tuple[str | None, tuple[CellSpec, ...]]]] = {}
    for cuda, platform, cells in found:
        if cells:
            majors.setdefault((cuda.split(".")[0] if cuda else "cpu", platform), []).append((cuda, cells))
    out: list[Group] = []
    for (major, where), members in majors.items():
        members.sort(key=lambda m: Version(m[0] or "0"))
        cuda, cells = members[0]
        served = tuple(
            dataclasses.replace(c, cuda=v, torch_index_url=index_url(request, v)) for v, cs in members for c in cs
        )
        out.append((cuda, where, stable_builds(cells, "cpu" if cuda is None else f"cu{major}"), served))
    return out


def index_url(request: ExtensionRequest, cuda: str | None) -> str | None:
    """Where a cell's torch comes from: PyTorch's index of its variant, or (None) the host's pip configuration."""
    return (
        TORCH_INDEX.format(variant=variant("cuda" if cuda else "cpu", cuda))
        if request.torch_index == "pytorch"
        else None
    )


def stable_builds(cells: tuple[CellSpec, ...], label: str) -> tuple[CellSpec, ...]:
    """abi "stable": per Python, the cell of the oldest torch in range (its wheel serves the rest), its wheel
    labelled by ``label`` alone (``+cu13``, not ``+pt210cu130``): it is not one torch's or one toolkit's build."""
    oldest: dict[str, CellSpec] = {}
    for cell in cells:
        if cell.python not in oldest or Version(cell.torch_version) < Version(oldest[cell.python].torch_version):
            oldest[cell.python] = cell
    return tuple(dataclasses.replace(c, local_label=label) for c in oldest.values())


def oldest_minor(request: ExtensionRequest, catalog: Catalog) -> str:
    """The oldest torch (X.Y) of the request's range: a stable wheel's floor may not be above it."""
    versions = [Version(resolve_version(spec, catalog).torch_version or spec) for spec in request.torch]
    oldest = min(versions)
    return f"{oldest.major}.{oldest.minor}"
