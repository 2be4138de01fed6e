"""An extension request's cells (torch x CUDA x Python x platform) and how they group into builds.

Per torch (the default): every cell is built, each (platform, CUDA toolkit)'s cells by one job's toolkit. abi
"stable" (LibTorch's stable ABI, issue 66): per (CUDA major, platform) one cell per Python is built, against the
range's oldest torch (``abi_build: newest``: its newest, with the oldest toolkit offering it) with the request's
oldest toolkit of that major; its wheel requires torch>= the range's oldest and serves, and the test jobs install it
into, every cell of the range (``build_groups``).
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


def build_groups(request: ExtensionRequest, catalog: Catalog, one_python: bool = False) -> list[Group]:
    """(CUDA or None, platform, cells to build, cells their wheels serve) per group of one job's toolkit. abi
    "stable": per (CUDA major, platform) and Python one cell is built, against the oldest torch any variant of
    the major offers that Python (``abi_build: newest``: the newest, its floor still the oldest), with the oldest
    toolkit offering it (a cu126 build runs on 12.8's runtime too); its wheel serves every cell of that Python and
    major, each with its own CUDA and torch index (the test jobs' environments). ``one_python``: the source's wheels
    are abi3 or py3-none (calibration), so the oldest Python's one build serves the cells of every Python of the
    major."""
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
    majors: dict[tuple[str, str], list[tuple[str | None, CellSpec]]] = {}
    for cuda, platform, cells in found:
        for cell in cells:
            majors.setdefault((cuda.split(".")[0] if cuda else "cpu", platform), []).append((cuda, cell))
    out: list[Group] = []
    for (major, where), members in majors.items():
        members.sort(key=lambda m: (Version(m[0] or "0"), Version(m[1].torch_version)))  # oldest toolkit first
        built: dict[str | None, list[CellSpec]] = {}
        served: dict[str | None, list[CellSpec]] = {}
        pythons = list(dict.fromkeys(cell.python for _, cell in members))
        pick = max if request.abi_build == "newest" else min  # the torch each build compiles against
        if one_python:  # that torch of the major first, then its oldest Python
            chosen = pick(Version(c.torch_version) for _, c in members)
            pythons = [min((c.python for _, c in members if Version(c.torch_version) == chosen), key=Version)]
        for python in pythons:
            mine = [(v, c) for v, c in members if c.python == python]
            chosen = pick(Version(c.torch_version) for _, c in mine)
            builder, cell = next((v, c) for v, c in mine if Version(c.torch_version) == chosen)
            oldest = min(Version(c.torch_version) for _, c in (members if one_python else mine))
            floor = f"{oldest.major}.{oldest.minor}"  # what the wheel serves from, whichever torch it compiles against
            built.setdefault(builder, []).append(
                dataclasses.replace(cell, local_label=stable_label(floor, major), floor=floor)
            )
            served.setdefault(builder, []).extend(
                dataclasses.replace(c, cuda=v, torch_index_url=index_url(request, v))
                for v, c in (members if one_python else mine)
            )
        out += [(cuda, where, tuple(cells), tuple(served[cuda])) for cuda, cells in built.items()]
    return out


def stable_label(floor: str, major: str) -> str:
    """A stable wheel's local label: its floor (X.Y, the range's oldest torch) and CUDA major (``abi210cu13``,
    ``abi213cpu``), not one torch's or one toolkit's (``pt210cu130``). The floor keeps a later build for a newer range
    from reusing the name."""
    return f"abi{floor.replace('.', '')}{'cpu' if major == 'cpu' else 'cu' + major}"


def index_url(request: ExtensionRequest, cuda: str | None) -> str | None:
    """Where a cell's torch comes from: PyTorch's index of its variant, or (None) the host's pip configuration."""
    return (
        TORCH_INDEX.format(variant=variant("cuda" if cuda else "cpu", cuda))
        if request.torch_index == "pytorch"
        else None
    )


def oldest_minor(request: ExtensionRequest, catalog: Catalog) -> str:
    """The oldest torch (X.Y) of the request's range: a stable wheel's floor may not be above it."""
    versions = [Version(resolve_version(spec, catalog).torch_version or spec) for spec in request.torch]
    oldest = min(versions)
    return f"{oldest.major}.{oldest.minor}"
