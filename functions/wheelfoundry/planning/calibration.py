"""What one extension cell costs: the catalog's model, scaled by recorded runs of the same source.

The model (config.toml ``extension_cell``): compile work in core-hours, CUDA linear in the architectures
of each nvcc call, plus ``extension_cell_serial`` hours. After a run, Report records each cell's compile
core-hours and its serial hours (environment, repair, smoke) under ``calibration/<source scope>.json``
(the compiler cache's scope: one source origin). Compile core-hours are the build stage's measured CPU
seconds (wfbuild.compiling.cpu_usage, the compiler cache server's share included); from a manifest without them,
the stage's seconds times the cores it was given (MAX_JOBS x nvcc threads, capped by
``extension_cores_per_cell`` x threads). A measured cell also records its width (CPU / wall: the cores
it kept busy) and the cores it was given. The next plan of that source scales the model by the recorded
cells' median ratio to it, per CPU and CUDA, so a package twice as heavy as the model gets twice the
hours, at whatever arch count it is planned with; and sizes instances by the width (wheelfoundry.planning.walltime):
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

from packaging.version import InvalidVersion, Version

from wheelfoundry.config import FarmConfig
from wheelfoundry.planning import compiler_memory
from wheelfoundry.planning.source_profile import SourceProfile
from wheelfoundry.planning.walltime import CellCost
from wheelfoundry.request.stable_wheels import python_free

KEEP = 64  # recorded cells per source: the newest
CLAMP = 20.0
BOUND = 0.75  # a cell busy below this share of its cores was limited by its own parallelism, not by them
MAX_PEAK_GIB = 512.0  # a recorded compiler peak is clamped to this (a build's own figures are untrusted)
MAX_WHEEL_BYTES = 20 * 10**9


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
    else what the source holds (``profile``), else the catalog's model; with its recorded peak memory per
    compiler and wheel size where the record has them."""
    cells = [c for c in (record or {}).get("cells", []) if isinstance(c, Mapping) and bool(c.get("cuda")) == cuda]
    cost = _work(cuda, archs, config, cells, profile)
    return dataclasses.replace(cost, peak_gib=recorded_peak(cells), wheel_bytes=recorded_wheel(cells, cuda, archs))


def recorded_peak(cells: Iterable[Mapping[str, Any]]) -> float | None:
    """The largest compiler any recorded cell of the source ran (GiB): memory is sized by the worst unit."""
    peaks = []
    for cell in cells:
        with contextlib.suppress(KeyError, TypeError, ValueError):
            peaks.append(min(MAX_PEAK_GIB, max(0.01, float(cell["peak_gib"]))))
    return round(max(peaks), 3) if peaks else None


def recorded_wheel(cells: Iterable[Mapping[str, Any]], cuda: bool, archs: int) -> int | None:
    """A cell wheel's bytes from the source's recorded cells: a CUDA cell's scale with its architectures."""
    sizes = []
    for cell in cells:
        with contextlib.suppress(KeyError, TypeError, ValueError, ZeroDivisionError):
            size = min(MAX_WHEEL_BYTES, max(0, int(cell["wheel_bytes"])))
            sizes.append(size / max(1, int(cell["archs"])) * archs if cuda else size)
    return round(statistics.median(sizes)) if sizes else None


def _work(
    cuda: bool, archs: int, config: FarmConfig, cells: list[Mapping[str, Any]], profile: SourceProfile | None
) -> CellCost:
    work, serial = model_work(cuda, archs, config), float(config.estimates["extension_cell_serial"])
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
        # a build attempt retried with fewer compilers after an OOM kill compiled: it is not serial time
        serial = sum(float(s.get("seconds") or 0) for s in mine if s is not build[0] and s.get("status") != "retried")
        record: dict[str, Any] = {"cell": cell.get("id"), "cuda": cuda, "archs": archs}
        cpu = build[0].get("cpu_seconds")
        if isinstance(cpu, int | float) and not isinstance(cpu, bool) and cpu >= 0 and seconds > 0:
            record |= {"compile_core_hours": round(cpu / 3600, 5), "width": round(cpu / seconds, 3)}
            record["cores"] = jobs * threads  # what the cell was given
        else:  # a manifest from before the runner measured: assume the cores it was given were busy
            record["compile_core_hours"] = round(seconds * cores / 3600, 5)
        record["serial_hours"] = round(serial / 3600, 5)
        peaks = [_peak_mib(s) for s in mine if str(s.get("name", "")).startswith("build-")]
        if any(p is not None for p in peaks):  # every attempt's (an OOM-killed one's too): the largest
            record["peak_gib"] = compiler_memory.recorded_gib(max(p for p in peaks if p is not None))
        reading = (manifest.get("abi") or {}).get(cell.get("id"))  # wfbuild.wheels.abi's: stable, floor
        if isinstance(reading, Mapping) and isinstance(reading.get("stable"), bool):
            record["abi"] = {"stable": reading["stable"], "floor": reading.get("floor"), "source": source_id(ext)}
        names = [str(w.get("name")) for w in manifest.get("wheels") or [] if _cell_of(w) == cell.get("id")]
        if names and "abi" in record:  # the wheel's tags: abi3 or py3-none serves every later Python
            record["abi"]["python_free"] = all(python_free(n) for n in names)
        sizes = [w.get("size") for w in manifest.get("wheels") or [] if _cell_of(w) == cell.get("id")]
        if sizes and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in sizes):
            record["wheel_bytes"] = max(sizes)
        out.append(record)
    return out


def _peak_mib(stage: Mapping[str, Any]) -> float | None:
    """A build stage's largest compiler (MiB), as the runner measured it (wfbuild.compiling.memwatch), or None."""
    found = []
    for key in ("memory", "oom"):
        part = stage.get(key)
        value = part.get("peak_unit_mib" if key == "memory" else "peak_mib") if isinstance(part, Mapping) else None
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            found.append(float(value))
    return max(found) if found else None


def _cell_of(wheel: Any) -> Any:
    cell = wheel.get("cell") if isinstance(wheel, Mapping) else None
    return cell.get("id") if isinstance(cell, Mapping) else None


def updated(
    record: Mapping[str, Any] | None, scope: str, run: str, cells: Iterable[Mapping[str, Any]]
) -> dict[str, Any]:
    """The source's record with this run's cells added (the newest KEEP kept)."""
    fresh = [{**c, "run": run} for c in cells]
    kept = [c for c in (record or {}).get("cells", []) if isinstance(c, Mapping) and c.get("run") != run]
    return {"scope": scope, "cells": (kept + fresh)[-KEEP:]}


def source_id(ext: Mapping[str, Any]) -> str:
    """The exact source a recorded reading is of: the sdist's S3 URI (its key names its digest), or repo@ref."""
    return str(ext.get("source_s3") or f"{ext.get('source_git')}@{ext.get('source_ref')}")


def proven_python_free(record: Mapping[str, Any] | None, source: str) -> str | None:
    """Why a stable plan of this ``source`` may build one Python for all (None: it may not): every cell of the
    newest recorded run of it made an abi3 or py3-none wheel."""
    run, cells = newest_run(record, source)
    if cells and all(c["abi"].get("python_free") is True for c in cells):
        return f"run {run} made abi3 / py3-none wheels"
    return None


def newest_run(record: Mapping[str, Any] | None, source: str) -> tuple[Any, list[Mapping[str, Any]]]:
    """(run, its cells with an abi reading) of the newest recorded run of this very ``source``; (None, [])."""
    cells = [
        c
        for c in (record or {}).get("cells", [])
        if isinstance(c, Mapping) and isinstance(c.get("abi"), Mapping) and c["abi"].get("source") == source
    ]
    run = cells[-1].get("run") if cells else None
    return run, [c for c in cells if c.get("run") == run]


def proven_stable(
    record: Mapping[str, Any] | None, oldest: str, source: str, kinds: frozenset[bool] = frozenset({False})
) -> str | None:
    """Why ``abi: auto`` may plan this source as stable (None: it may not): the newest recorded run of this very
    ``source`` read every cell stable, with a floor no newer than ``oldest`` (X.Y), the request's oldest torch,
    and it built each kind the request asks for (``kinds``: CUDA or not). A record is kept per source origin
    (a repository, a PyPI project): another version's reading proves nothing."""
    run, cells = newest_run(record, source)
    if not cells or not kinds <= {bool(c.get("cuda")) for c in cells}:
        return None
    last = [c["abi"] for c in cells]

    def within(floor: Any) -> bool:
        try:
            return Version(str(floor)) <= Version(oldest)
        except InvalidVersion:  # no floor read
            return False

    if all(a.get("stable") is True and within(a.get("floor")) for a in last):
        return f"run {run} read its {len(last)} cell(s) stable, floors at most torch {oldest}"
    return None
