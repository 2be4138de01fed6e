"""What one extension cell costs: the catalog's model, scaled by recorded runs of the same source.

The model (config.toml ``extension_cell``): compile work in core-hours, CUDA linear in the architectures
of each nvcc call, plus ``extension_cell_serial`` hours. After a run, Report records each cell's compile
core-hours and its serial hours (environment, repair, smoke) under ``calibration/<source scope>.json``
(the compiler cache's scope: one source origin). Compile core-hours are the build stage's measured CPU
seconds (wfbuild.cpu_usage, the compiler cache server's share included); from a manifest without them,
the stage's seconds times the cores it was given (MAX_JOBS x nvcc threads, capped by
``extension_cores_per_cell`` x threads). A measured cell also records its width (CPU / wall: the cores
it kept busy) and the cores it was given. The next plan of that source scales the model by the recorded
cells' median ratio to it, per CPU and CUDA, so a package twice as heavy as the model gets twice the
hours, at whatever arch count it is planned with; and sizes instances by the width (wheelfoundry.walltime):
a cell that kept well under the cores it was given busy (BOUND: few translation units, a serial link) is
planned at that width, one that used them all at whatever it is given.

A recorded figure comes from a build's own manifest (untrusted): each is clamped to [1/20, 20] times the
model, so a lying build can skew only its own source's estimates, and only so far.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from wheelfoundry.config import FarmConfig
from wheelfoundry.source_profile import SourceProfile
from wheelfoundry.walltime import CellCost

KEEP = 64  # recorded cells per source: the newest
CLAMP = 20.0
BOUND = 0.75  # a cell busy below this share of its cores was limited by its own parallelism, not by them


def model_work(cuda: bool, archs: int, config: FarmConfig) -> float:
    model = config.estimates["extension_cell"]
    if not cuda:
        return float(model["cpu"])
    return float(model["cuda"]) + float(model["cuda_per_arch"]) * archs


def profiled_work(cuda: bool, archs: int, profile: SourceProfile, config: FarmConfig) -> float:
    """Compile core-hours of one cell from the units the source holds (config.toml ``extension_source``)."""
    fit = config.estimates["extension_source"]
    power = float(fit["unit_exponent"])
    seconds = float(fit["cpp_unit_seconds"]) * profile.cpp_units**power
    if cuda:
        per_cu = float(fit["cu_unit_seconds"]) + float(fit["cu_arch_seconds"]) * archs
        seconds += per_cu * profile.cu_units**power
    return float(seconds) / 3600


def cell_cost(
    cuda: bool,
    archs: int,
    config: FarmConfig,
    record: Mapping[str, Any] | None = None,
    profile: SourceProfile | None = None,
) -> CellCost:
    """The cell's compile core-hours and serial hours: recorded runs of this source where there are any,
    else what the source holds (``profile``), else the catalog's model."""
    work, serial = model_work(cuda, archs, config), float(config.estimates["extension_cell_serial"])
    cells = [c for c in (record or {}).get("cells", []) if isinstance(c, Mapping) and bool(c.get("cuda")) == cuda]
    ratios, serials, widths = [], [], []
    for cell in cells:
        try:
            model = model_work(cuda, int(cell["archs"]), config)
            ratios.append(min(CLAMP, max(1 / CLAMP, float(cell["compile_core_hours"]) / model)))
            serials.append(min(CLAMP * serial, max(0.0, float(cell["serial_hours"]))))
        except (KeyError, TypeError, ValueError):
            continue
        with contextlib.suppress(KeyError, TypeError, ValueError):  # measured cells: (cores kept busy, given)
            widths.append((min(256.0, max(0.05, float(cell["width"]))), max(1.0, float(cell["cores"]))))
    units = profile.units(cuda) if profile is not None and profile.units(cuda) else None
    if not ratios and units is not None and profile is not None:
        profiled = round(max(profiled_work(cuda, archs, profile, config), 1e-4), 4)
        return CellCost(profiled, serial, f"the source's {profile.describe()}", units=units)
    if not ratios:
        return CellCost(round(work, 4), serial, "catalog model")
    ratio = statistics.median(ratios)
    source = f"{len(ratios)} recorded {'CUDA' if cuda else 'CPU'} cell(s) of this source (x{ratio:.2f} the model)"
    cost = CellCost(round(work * ratio, 4), round(statistics.median(serials), 4), source)
    if not widths:
        return cost
    bound = [w for w, given in widths if w < BOUND * given]
    # Most cells limited by their own parallelism: plan at that width; else they use what they get.
    limit = round(statistics.median(bound), 3) if len(bound) * 2 > len(widths) else None
    busy, given = statistics.median(w for w, _ in widths), statistics.median(g for _, g in widths)
    seen = f"; a cell kept {busy:.1f} of its {given:g} cores busy"
    return dataclasses.replace(cost, source=source + seen, recorded=True, width_limit=limit)


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
        record: dict[str, Any] = {"cell": cell.get("id"), "cuda": cuda, "archs": archs}
        cpu = build[0].get("cpu_seconds")
        if isinstance(cpu, int | float) and not isinstance(cpu, bool) and cpu >= 0 and seconds > 0:
            record |= {"compile_core_hours": round(cpu / 3600, 5), "width": round(cpu / seconds, 3)}
            record["cores"] = jobs * threads  # what the cell was given
        else:  # a manifest from before the runner measured: assume the cores it was given were busy
            record["compile_core_hours"] = round(seconds * cores / 3600, 5)
        record["serial_hours"] = round(serial / 3600, 5)
        out.append(record)
    return out


def updated(
    record: Mapping[str, Any] | None, scope: str, run: str, cells: Iterable[Mapping[str, Any]]
) -> dict[str, Any]:
    """The source's record with this run's cells added (the newest KEEP kept)."""
    fresh = [{**c, "run": run} for c in cells]
    kept = [c for c in (record or {}).get("cells", []) if isinstance(c, Mapping) and c.get("run") != run]
    return {"scope": scope, "cells": (kept + fresh)[-KEEP:]}
