"""How big an extension's wheels will be, before they are built, and the layout an index's limit calls for.

A cell wheel's size comes from the source's recorded runs where there are any (Report records each cell
wheel's bytes in ``calibration/<source>.json``; a CUDA cell's scale with its architectures:
wheelfoundry.planning.calibration), else from a model: a CPU build is small, a CUDA build carries device code for
every architecture of its arch list (SASS per arch, ``+PTX`` one more). The model's constants are on the
large side of what PyTorch extensions with a handful of kernels measure; a recorded size always wins.

A merged wheel holds every cell of its Python, so its size is the sum of its cells'. Where the request
publishes to an index with a per-file limit and leaves the layout to the farm (``auto``), a merged wheel
predicted over the limit is planned per cell when the index takes per-cell wheels (CodeArtifact, an
upload URL with ``max_file_mb``); PyPI and TestPyPI refuse their local version labels, so the plan says
where such wheels go instead: a public channel of the stack, which has no per-file limit.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from wheelfoundry.request.model import ExtensionRequest
from wheelfoundry.request.publish_targets import LIMIT_OPTIONS, PublishTarget
from wheelfoundry.request.targets import split_arch_list

CPU_CELL_BYTES = 1_000_000
CUDA_BYTES_PER_ARCH = 6_000_000  # one arch's SASS (or PTX) of a mid-sized extension, compressed
LOCAL_LABELS_REFUSED = ("pypi", "testpypi")


def modelled(cuda: bool, arch_list: str | None) -> int:
    if not cuda:
        return CPU_CELL_BYTES
    archs = split_arch_list(arch_list or "")
    return CUDA_BYTES_PER_ARCH * (len(archs) + sum(a.endswith("+PTX") for a in archs))


def cell_bytes(cuda: bool, arch_list: str | None, recorded: int | None) -> tuple[int, bool]:
    """A cell wheel's predicted bytes, and whether the source's recorded runs gave it (else the model)."""
    return (recorded, True) if recorded is not None else (modelled(cuda, arch_list), False)


def merged_sizes(cells: Iterable[tuple[str, str, int]]) -> dict[tuple[str, str], int]:
    """Each merged wheel's bytes ((Python, platform) -> bytes) from its cells' (Python, platform, bytes)."""
    totals: dict[tuple[str, str], int] = defaultdict(int)
    for python, platform, size in cells:
        totals[(python, platform)] += size
    return dict(totals)


def auto_layout(
    sizes: Mapping[tuple[str, str], int], largest_cell: int, target: PublishTarget | None
) -> tuple[str, str | None]:
    """The layout ``auto`` resolves to at plan time ("auto": left to Merge), and the plan's note, if any."""
    limit = target.limit_mb if target is not None else None
    if target is None or limit is None or not sizes:
        return "auto", None
    (python, platform), size = max(sizes.items(), key=lambda item: item[1])
    if size <= limit * 1_000_000:
        return "auto", None
    over = f"the merged wheel for Python {python} {platform} would be ~{size / 1e6:.3g} MB, over {target.name}'s "
    over += f"per-file limit of {limit:g} MB"
    if target.kind in LOCAL_LABELS_REFUSED:
        return "auto", f"{over}: {LIMIT_OPTIONS}"
    if largest_cell > limit * 1_000_000:
        return "auto", f"{over}, and so would a cell wheel (~{largest_cell / 1e6:.3g} MB): {LIMIT_OPTIONS}"
    return "per-cell", f"layout per-cell: {over}; each cell wheel (~{largest_cell / 1e6:.3g} MB at most) fits"


def resolve_layout(
    request: ExtensionRequest, cells: Sequence[tuple[str, str, int]]
) -> tuple[ExtensionRequest, str | None]:
    """The request with ``auto`` planned per cell where ``auto_layout`` says so; the plan's note, if any.
    ``cells``: each cell's (Python, platform, predicted bytes)."""
    if request.layout != "auto":
        return request, None
    largest = max((size for *_, size in cells), default=0)
    layout, note = auto_layout(merged_sizes(cells), largest, request.options.publish)
    return (dataclasses.replace(request, layout="per-cell") if layout == "per-cell" else request), note
