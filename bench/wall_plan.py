"""The plan of a 48-cell extension matrix before and after wall-time planning: wall, build-hours, dollars.

    .venv/bin/python bench/wall_plan.py [--request bench/requests/torch-scatter-48.json]

torch-scatter x torch 2.11-2.14 x CUDA {cpu, 12.6, 13.0} x Python 3.10-3.13 (the matrix a PyG-style
maintainer publishes for each torch release). Rows:
- before: the layout the planner chose before max_wall_hours: one job per CUDA toolkit on the default
  extension instance, cells at once as memory allows, no nvcc threads; timed with the same cell model;
- after, for several max_wall_hours: what `wheelfoundry plan` chooses (instance types, parts per toolkit,
  nvcc threads).
Figures: the planner's model (config.toml [estimates] extension_cell; no recorded runs), spot prices; the
rows marked [old figures] feed in the per-cell costs of the planner before this change (6.4 core-hours a
CUDA cell, 1.6 a CPU cell) as if recorded for this source: the layout for a package that heavy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REQUEST = ROOT / "bench" / "requests" / "torch-scatter-48.json"


# The per-cell figures of the planner before this change (0.2 h a CUDA cell and 0.05 h a CPU cell on its
# 32-vCPU reference, linear in cores: 6.4 and 1.6 core-hours), fed in as if recorded for this source.
OLD_FIGURES = {"cells": [{"cuda": True, "archs": 7, "compile_core_hours": 6.4, "serial_hours": 0.05},
                         {"cuda": False, "archs": 0, "compile_core_hours": 1.6, "serial_hours": 0.05}]}  # fmt: skip


def before(raw: dict[str, Any], record: dict[str, Any] | None = None) -> dict[str, Any]:
    """One job per toolkit on [instances] extension-x86_64, threads off: today's layout, this model."""
    from wheelfoundry.catalog.catalog import load_catalog
    from wheelfoundry.config import load_config
    from wheelfoundry.planning import walltime
    from wheelfoundry.planning.calibration import cell_cost
    from wheelfoundry.planning.cells import cells_for
    from wheelfoundry.planning.extensions import default_arch_list
    from wheelfoundry.request.model import ExtensionRequest
    from wheelfoundry.request.request import parse_request

    catalog, config = load_catalog(), load_config()
    request = parse_request(raw, catalog, config)
    assert isinstance(request, ExtensionRequest)
    instance = config.instance_types[config.instances["extension-x86_64"]]
    walls, usd = [], 0.0
    for spec in request.cuda:
        cuda = None if spec == "cpu" else spec
        cells = cells_for(request, catalog, cuda, "x86_64")
        archs = walltime.arch_count(default_arch_list(catalog, cells, cuda, "x86_64")) if cuda else 1
        slots = walltime.compile_slots(instance, len(cells), bool(cuda), archs, config, threads_on=False)
        wall = walltime.job_wall(len(cells), cell_cost(bool(cuda), archs, config, record), slots, config)
        walls.append(round(wall, 2))
        usd += round(wall * walltime.usd_per_hour(instance, request.options.spot, config), 2)
    layout = f"{len(walls)} x {instance.name}, no nvcc threads"
    name = "before (one job per toolkit)" + (" [old figures]" if record else "")
    return {"plan": name, "layout": layout, "jobs": len(walls), "wall_hours": max(walls),
            "build_hours": round(sum(walls), 2), "usd": round(usd, 2)}  # fmt: skip


def after(raw: dict[str, Any], wall: float, record: dict[str, Any] | None = None) -> dict[str, Any]:
    from wheelfoundry.catalog.catalog import load_catalog
    from wheelfoundry.config import load_config
    from wheelfoundry.planning.planning import plan_request
    from wheelfoundry.request.request import parse_request

    catalog, config = load_catalog(), load_config()
    request = parse_request({**raw, "options": {"max_wall_hours": wall}}, catalog, config)
    plan = plan_request(request, catalog, config, record=record)
    kinds: dict[str, int] = {}
    for job in plan.jobs:
        kinds[job.instance.type] = kinds.get(job.instance.type, 0) + 1
    threads = sorted({j.extension.nvcc_threads for j in plan.jobs if j.extension and j.cuda})
    layout = ", ".join(f"{n} x {t}" for t, n in kinds.items()) + f", nvcc threads {'/'.join(map(str, threads))}"
    name = f"after, max_wall_hours {wall:g}" + ("" if plan.wall_hours <= wall else " (not met)")
    name += " [old figures]" if record else ""
    return {"plan": name, "layout": layout, "jobs": len(plan.jobs), "wall_hours": plan.wall_hours,
            "build_hours": plan.hours, "usd": plan.usd}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--request", type=Path, default=REQUEST)
    parser.add_argument("--walls", default="48,2,1,0.5,0.25")
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT / "functions")]
    raw = json.loads(args.request.read_text())
    walls = [float(w) for w in args.walls.split(",")]
    rows = [before(raw)] + [after(raw, w) for w in walls]
    rows += [before(raw, OLD_FIGURES)] + [after(raw, w, OLD_FIGURES) for w in walls]
    print(f"{'plan':50} {'jobs':>4} {'wall h':>7} {'build-h':>8} {'USD':>7}  layout")
    for r in rows:
        figures = f"{r['jobs']:>4} {r['wall_hours']:>7.2f} {r['build_hours']:>8.2f} {r['usd']:>7.2f}"
        print(f"{r['plan']:50} {figures}  {r['layout']}")
    out = ROOT / "bench" / "results" / f"wall_plan-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps({"request": raw, "cpus": os.cpu_count(), "rows": rows}, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
