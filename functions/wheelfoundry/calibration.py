"""What one extension cell costs: the catalog's model, scaled by recorded runs of the same source.

The model (config.toml ``extension_cell``): compile work in core-hours, CUDA linear in the architectures
of each nvcc call, plus ``extension_cell_serial`` hours. After a run, Report records each cell's compile
core-hours (its build stage's seconds times the cores it was given: MAX_JOBS x nvcc threads, capped by
``extension_cores_per_cell`` x threads) and its serial hours (environment, repair, smoke) under
``calibration/<source scope>.json`` (the compiler cache's scope: one source origin). The next plan of that
source scales the model by the recorded cells' median ratio to it, per CPU and CUDA, so a package twice as
heavy as the model gets twice the hours, at whatever arch count it is planned with.

A recorded figure comes from a build's own manifest (untrusted): each is clamped to [1/20, 20] times the
model, so a lying build can skew only its own source's estimates, and only so far.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from wheelfoundry.config import FarmConfig
from wheelfoundry.walltime import CellCost

KEEP = 64  # recorded cells per source: the newest
CLAMP = 20.0


def model_work(cuda: bool, archs: int, config: FarmConfig) -> float:
    model = config.estimates["extension_cell"]
    if not cuda:
        return float(model["cpu"])
    return float(model["cuda"]) + float(model["cuda_per_arch"]) * archs


def cell_cost(cuda: bool, archs: int, config: FarmConfig, record: Mapping[str, Any] | None = None) -> CellCost:
    """The cell's compile core-hours and serial hours: recorded runs of this source where there are any."""
    work, serial = model_work(cuda, archs, config), float(config.estimates["extension_cell_serial"])
    cells = [c for c in (record or {}).get("cells", []) if isinstance(c, Mapping) and bool(c.get("cuda")) == cuda]
    ratios, serials = [], []
    for cell in cells:
        try:
            model = model_work(cuda, int(cell["archs"]), config)
            ratios.append(min(CLAMP, max(1 / CLAMP, float(cell["compile_core_hours"]) / model)))
            serials.append(min(CLAMP * serial, max(0.0, float(cell["serial_hours"]))))
        except (KeyError, TypeError, ValueError):
            continue
    if not ratios:
        return CellCost(round(work, 4), serial, "catalog model")
    ratio = statistics.median(ratios)
    source = f"{len(ratios)} recorded {'CUDA' if cuda else 'CPU'} cell(s) of this source (x{ratio:.2f} the model)"
    return CellCost(round(work * ratio, 4), round(statistics.median(serials), 4), source)


def cells_of(job: Mapping[str, Any], manifest: Mapping[str, Any], config: FarmConfig) -> list[dict[str, Any]]:
    """One record per cell of a finished extension job whose build succeeded (its stages in the manifest)."""
    ext = job.get("extension") or {}
    cuda = bool(job.get("cuda"))
    archs = len([a for a in str(job.get("arch_list") or "").replace(" ", ";").split(";") if a]) if cuda else 0
    shared = manifest.get("parallelism") or {}
    jobs, threads = int(shared.get("max_jobs") or 1), int(shared.get("nvcc_threads") or 1)
    per_cell = int(config.estimates["extension_cores_per_cell"]["cuda" if cuda else "cpu"])
    cores = max(1, min(jobs, per_cell) * threads)
    stages = [s for s in manifest.get("stages") or [] if isinstance(s, Mapping)]
    out = []
    for cell in ext.get("cells") or []:
        mine = [s for s in stages if s.get("group") == cell.get("id")]
        build = [s for s in mine if str(s.get("name", "")).startswith("build-") and s.get("status") == "succeeded"]
        if not build:
            continue
        seconds = float(build[0].get("seconds") or 0)
        serial = sum(float(s.get("seconds") or 0) for s in mine if s is not build[0])
        out.append(
            {
                "cell": cell.get("id"),
                "cuda": cuda,
                "archs": archs,
                "compile_core_hours": round(seconds * cores / 3600, 5),
                "serial_hours": round(serial / 3600, 5),
            }
        )
    return out


def updated(
    record: Mapping[str, Any] | None, scope: str, run: str, cells: Iterable[Mapping[str, Any]]
) -> dict[str, Any]:
    """The source's record with this run's cells added (the newest KEEP kept)."""
    fresh = [{**c, "run": run} for c in cells]
    kept = [c for c in (record or {}).get("cells", []) if isinstance(c, Mapping) and c.get("run") != run]
    return {"scope": scope, "cells": (kept + fresh)[-KEEP:]}
