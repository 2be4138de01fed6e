"""How big each merged wheel of an extension run will be, per Python and platform, before it is built.

A merged wheel holds every cell of its Python (one build per torch x CUDA under ``<dist>.wfbuilds/<build
id>/``), so its size is the sum of its cells'. A cell's size comes from earlier runs where known: the
merged wheels of an earlier run (``wheelfoundry fetch``) give each build folder's compressed bytes; else
the plan's prediction (wheelfoundry.planning.wheel_size: the source's recorded cell wheels, ``plan --calibration``,
else a model: a CPU build is small, a CUDA build carries device code for every arch of its arch list).
"""

from __future__ import annotations

import zipfile
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from wheelfoundry.planning import wheel_size
from wheelfoundry.planning.jobs import Job
from wheelfoundry.request.publish_targets import LIMIT_OPTIONS, PublishTarget


@dataclass(frozen=True)
class SizeEstimate:
    python: str
    platform: str
    size: int
    cells: int
    measured: int  # how many of the cells' sizes came from earlier runs

    def describe(self) -> str:
        basis = f"{self.measured} measured" + (
            f", {self.cells - self.measured} modelled" if self.cells > self.measured else ""
        )
        return f"Python {self.python} {self.platform}: ~{self.size / 1e6:.3g} MB ({self.cells} cell(s): {basis})"


def measured_cells(wheels: Iterable[Path]) -> dict[str, int]:
    """{build id: compressed bytes} from merged wheels of earlier runs (the largest seen per build id)."""
    sizes: dict[str, int] = {}
    for wheel in wheels:
        per_build: dict[str, int] = defaultdict(int)
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                top, _, rest = info.filename.partition("/")
                if top.endswith(".wfbuilds") and "/" in rest:
                    per_build[rest.split("/", 1)[0]] += info.compress_size
        for build, size in per_build.items():
            sizes[build] = max(size, sizes.get(build, 0))
    return sizes


def modelled(job: Job) -> int:
    """The plan's prediction of one cell wheel of ``job`` (recorded runs of the source, else the model)."""
    if job.extension is not None and job.extension.cell_wheel_bytes:
        return job.extension.cell_wheel_bytes
    return wheel_size.modelled(bool(job.cuda), job.arch_list)


def estimate(jobs: Iterable[Job], known: dict[str, int] | None = None) -> list[SizeEstimate]:
    """One estimate per merged wheel (Python, platform) of the extension jobs in the merged layout."""
    known = known or {}
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for job in jobs:
        # auto merges unless the library is loaded by path (decided at Merge): size it as merged
        if job.extension is None or job.extension.layout not in ("merged", "auto"):
            continue
        for cell in job.extension.cells:
            entry = totals[(cell.python, job.platform)]
            size = known.get(cell.build_id)
            entry[0] += size if size is not None else modelled(job)
            entry[1] += 1
            entry[2] += size is not None or (job.extension.cell_wheel_recorded and size is None)
    return [SizeEstimate(py, plat, size, n, m) for (py, plat), (size, n, m) in sorted(totals.items())]


def warnings(estimates: Iterable[SizeEstimate], target: PublishTarget | None) -> list[str]:
    """The merged wheels that would exceed the publish target's per-file limit (PyPI's when none is named)."""
    target = target or PublishTarget("pypi")
    limit = target.limit_mb
    if limit is None:
        return []
    return [
        f"{e.describe()} would exceed {target.name}'s per-file limit of {limit:g} MB; options: {LIMIT_OPTIONS}"
        for e in estimates
        if e.size > limit * 1_000_000
    ]
