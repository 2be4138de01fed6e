"""One wheel for every torch (issue 66), planned: a package over torch 2.10-2.15 x CPU + each CUDA variant x
Python 3.10-3.14, built per torch minor (today) against built once per CUDA major on PyPI's stable ABI.
Prints a table and writes bench/results/abi_plans-<UTC>.json.

    .venv/bin/python bench/abi_plans.py [--pypi-url URL] [--recorded DIR ...]

Both columns come from the farm's own planner (wheelfoundry.planning.planning.plan_request), not a formula:
- per torch: one request per torch minor with every variant that release ships (the catalog's, and torch
  2.15's from upstream as the watcher reads it, with the CUDA 13.2 lock resolved as the watcher would, written
  nowhere): its build jobs, and its test jobs (the published bytes, each cell);
- stable: the builds a stable-ABI package needs, one per (CUDA major, platform) and Python (or one for an
  abi3 / py3-none wheel), each against the oldest torch of the range that ships that major, with that
  release's oldest toolkit of the major: one request each through the same planner. Its tests are the same
  environments as per torch (every torch x variant x Python the wheel claims), so the per-torch plan's test
  jobs are counted for it too.
The cells are sized by the catalog's model (no source profile): what differs between the columns is how many
builds there are.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
MINORS = ("2.10", "2.11", "2.12", "2.13", "2.14", "2.15")
PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")
SOURCE = {"s3": "s3://your-stack-bucket/sources/your-ext-1.0.tar.gz"}


def major_of(variant: str) -> str:
    return variant if variant == "cpu" else variant.split(".")[0]


def toolkit_order(variant: str) -> Version:
    return Version("0") if variant == "cpu" else Version(variant)


def totals(plans: list[Any]) -> dict[str, Any]:
    return {
        "builds": sum(len(j.extension.cells) for p in plans for j in p.jobs if j.extension),
        "build_jobs": sum(len(p.jobs) for p in plans),
        "test_jobs": sum(len(p.tests) for p in plans),
        "build_hours": round(sum(j.estimate.hours for p in plans for j in p.jobs), 2),
        "test_hours": round(sum(t.estimate.hours for p in plans for t in p.tests), 2),
        "usd_builds": round(sum(j.estimate.usd for p in plans for j in p.jobs), 2),
        "usd_tests": round(sum(t.estimate.usd for p in plans for t in p.tests), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pypi-url", default="https://pypi.org/")
    parser.add_argument("--pytorch-url", default="https://download.pytorch.org/whl/")
    parser.add_argument("--recorded", action="append", type=Path, help="answer from recorded indexes (offline)")
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT / "functions"), str(ROOT / "cli")]
    from wheelfoundry_cli.newer_torch import catalog_for
    from wheelfoundry_cli.watch_local import recorded

    from wheelfoundry.aws.watch import Sources, urllib_fetch
    from wheelfoundry.catalog.catalog import load_catalog
    from wheelfoundry.config import load_config
    from wheelfoundry.planning.planning import plan_request
    from wheelfoundry.request.request import parse_request

    sources = Sources(args.pypi_url, args.pytorch_url)
    fetch = recorded(*args.recorded) if args.recorded else urllib_fetch
    config, started = load_config(), time.monotonic()
    seed = {"framework": "extension", "name": "your-ext", "torch": ["2.15"], "cuda": ["cpu", "13.2"],
            "python": ["3.12"], "source": SOURCE}  # fmt: skip
    # torch 2.15's facts as the watcher derives them, and PyPI's build's CUDA 13.2 locked as it would (not written)
    found = catalog_for(seed, load_catalog(), config, None, fetch, sources)
    catalog = found.catalog if found is not None else load_catalog()
    releases = {m: catalog.release(m) for m in MINORS}
    variants = {m: ["cpu", *(c for c in r.cuda if c in catalog.cuda)] for m, r in releases.items()}
    pythons = {m: [p for p in PYTHONS if p in r.python] for m, r in releases.items()}

    def plan(torch: str, cuda: list[str], python: list[str]) -> Any:
        raw = {"framework": "extension", "name": "your-ext", "torch": [torch], "cuda": cuda, "python": python,
               "source": SOURCE}  # fmt: skip
        return plan_request(parse_request(raw, catalog, config), catalog, config)

    per_torch = [plan(m, variants[m], pythons[m]) for m in MINORS]
    # A stable build per (CUDA major, Python): against the oldest torch of the range that ships both, with that
    # release's oldest toolkit of the major; builds that share (torch, toolkit) plan as one request.
    groups: dict[tuple[str, str], list[str]] = {}
    for major in sorted({major_of(v) for m in MINORS for v in variants[m]}):
        for python in PYTHONS:
            ships = [m for m in MINORS if python in pythons[m] and any(major_of(v) == major for v in variants[m])]
            if ships:
                oldest = min((v for v in variants[ships[0]] if major_of(v) == major), key=toolkit_order)
                groups.setdefault((ships[0], oldest), []).append(python)
    stable = [plan(m, [cuda], python) for (m, cuda), python in groups.items()]
    abi3 = [plan(m, [cuda], python[:1]) for (m, cuda), python in groups.items()]
    environments = sum(len(variants[m]) * len(pythons[m]) for m in MINORS)
    rows = {"per torch": totals(per_torch), "stable, per Python": totals(stable), "stable, abi3": totals(abi3)}
    for name in ("stable, per Python", "stable, abi3"):  # the same environments test the one wheel
        rows[name] |= {k: rows["per torch"][k] for k in ("test_jobs", "test_hours", "usd_tests")}
    for row in rows.values():
        row["usd"] = round(row["usd_builds"] + row["usd_tests"], 2)
        row["hours"] = round(row["build_hours"] + row["test_hours"], 2)
    where = "recorded" if args.recorded else "live"
    print(f"torch {' '.join(MINORS)} (2.15 from {where} upstream), Pythons {' '.join(PYTHONS)}")
    for m in MINORS:
        print(f"  torch {m}: variants {' '.join(variants[m])}; Pythons {' '.join(pythons[m])}")
    builds = [f"torch {m} {cuda}: Python {' '.join(python)}" for (m, cuda), python in groups.items()]
    print(f"stable builds: {'; '.join(builds)}")
    print(f"test environments (torch x variant x Python), either plan: {environments}")
    print(f"{'plan':20} {'builds':>6} {'jobs':>5} {'tests':>5} {'build-h':>8} {'test-h':>7} {'USD':>8}")
    for name, r in rows.items():
        print(f"{name:20} {r['builds']:>6} {r['build_jobs']:>5} {r['test_jobs']:>5} {r['build_hours']:>8.2f} "
              f"{r['test_hours']:>7.2f} {r['usd']:>8.2f}")  # fmt: skip
    out = ROOT / "bench" / "results" / f"abi_plans-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    stable_builds = [{"torch": m, "variant": c, "python": p} for (m, c), p in groups.items()]
    record = {"minors": list(MINORS), "pythons": list(PYTHONS), "variants": variants, "stable_builds": stable_builds,
              "environments": environments, "rows": rows, "recorded": bool(args.recorded),
              "seconds": round(time.monotonic() - started, 1), "cpus": os.cpu_count()}  # fmt: skip
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
