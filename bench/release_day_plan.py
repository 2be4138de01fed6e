"""Release day's plan (issue 64): torch 2.15 for two real subscriptions, torch-scatter and causal-conv1d,
across every variant and Python torch 2.15 ships: cells, jobs, wall hours and dollars against the 2 h goal.
Prints a table and writes bench/results/release_day_plan-<UTC>.json.

    .venv/bin/python bench/release_day_plan.py [--pypi-url URL] [--goal-hours 2]

Live, from upstream, as the watcher's tick reads it: PyPI's torch page (torch 2.15.0's Pythons; its Linux
wheel's METADATA: the CUDA of PyPI's build) and PyTorch's index where reachable (its variants: cpu, cu126,
cu130 ... each adds cells; where it is not reachable the variants known are PyPI's CUDA build and, assumed,
the CPU build PyTorch publishes for every release, and the result says so). The CUDA toolkit PyPI's build
needs and this checkout has no lock for (13.2: issue 64 item 5) is resolved as the watcher would lock it
(wheelfoundry_cli.newer_torch: aws.toolkits.resolve_locks, written nowhere) and the plan uses its row. Each
subscription's newest sdist on PyPI sizes its cells (wheelfoundry.planning.source_profile), as `plan --source` does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
# (subscription, the variants it builds): causal-conv1d is CUDA-only (its setup.py needs nvcc).
SUBSCRIPTIONS = (("torch-scatter", True), ("causal-conv1d", False))


def sdist_profile(fetch: Any, sources: Any, project: str) -> tuple[str, Any]:
    """(version, the source profile) of the project's newest sdist on PyPI, sha256 checked."""
    import hashlib

    from wheelfoundry.catalog.upstream_index import SIMPLE_JSON, pypi_files
    from wheelfoundry.planning.source_profile import from_path
    from wheelfoundry.watch.watch_facts import package_releases

    page = sources.simple(project)
    newest = package_releases(pypi_files(fetch(page, {"Accept": SIMPLE_JSON}), page))[-1]
    body = fetch(newest.url, {})
    assert newest.sha256 in (None, hashlib.sha256(body).hexdigest()), f"{newest.url}: sha256 differs from PyPI's"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / newest.filename
        path.write_bytes(body)
        return newest.version, from_path(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pypi-url", default="https://pypi.org/")
    parser.add_argument("--pytorch-url", default="https://download.pytorch.org/whl/")
    parser.add_argument("--goal-hours", type=float, default=2.0)
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT / "functions"), str(ROOT / "cli")]
    from wheelfoundry_cli.newer_torch import catalog_for

    from wheelfoundry.aws.watch import Sources, read_upstream, urllib_fetch
    from wheelfoundry.catalog.catalog import load_catalog
    from wheelfoundry.catalog.upstream_index import cuda_of
    from wheelfoundry.config import load_config
    from wheelfoundry.planning.planning import plan_request
    from wheelfoundry.request.request import parse_request

    sources, fetch = Sources(args.pypi_url, args.pytorch_url), urllib_fetch
    catalog, config = load_catalog(), load_config()
    started = time.monotonic()
    upstream = read_upstream(fetch, sources, [], catalog)
    (release,) = [r for r in upstream.torch if r.minor == "2.15"]
    cudas = {c for label in release.variants if "x86_64" in release.variants[label] and (c := cuda_of(label))}
    known = "PyTorch's index read" if upstream.pytorch_index_read else "PyTorch's index NOT read"
    variants = ["cpu", *sorted(cudas, key=Version)]
    if release.pypi_cuda and release.pypi_cuda not in variants:
        variants.append(release.pypi_cuda)
    python = [p for p in release.python if not p.endswith("t")]
    rows: list[dict[str, Any]] = []
    lock: dict[str, Any] = {}
    for name, cpu in SUBSCRIPTIONS:
        version, profile = sdist_profile(fetch, sources, name)
        cuda = [v for v in variants if cpu or v != "cpu"]
        raw = {"framework": "extension", "name": name, "torch": [release.version], "cuda": cuda, "python": python,
               "source": {"s3": f"s3://your-stack-bucket/sources/{name}-{version}.tar.gz"}}  # fmt: skip
        found = catalog_for(raw, catalog, config, None, fetch, sources)
        assert found is not None, "torch 2.15 is in the catalog: this bench is for a release it lacks"
        for entry, body in found.locks:
            lock = {"cuda": entry.cuda, "platform": entry.platform, "release": entry.row.toolkit, "key": entry.key,
                    "sha256": entry.sha256, "default_arch_list": entry.row.default_arch_list,
                    "archs_source": entry.sources.get("archs"), "bytes": len(body)}  # fmt: skip
        request = parse_request(raw, found.catalog, config)
        plan = plan_request(request, found.catalog, config, profile=profile)
        cells = sum(len(j.extension.cells) for j in plan.jobs if j.extension)
        rows.append({"subscription": f"{name} {version}", "variants": " ".join(cuda), "pythons": len(python),
                     "cells": cells, "jobs": len(plan.jobs), "test_jobs": len(plan.tests),
                     "wall_hours": plan.wall_hours, "build_hours": plan.hours, "usd": plan.usd,
                     f"meets_{args.goal_hours:g}h": plan.wall_hours <= args.goal_hours})  # fmt: skip
    print(f"torch {release.version}: Pythons {' '.join(python)}; variants {' '.join(variants)} ({known})")
    if lock:
        print(f"toolkit lock (dry run, resolved live): CUDA {lock['cuda']} {lock['platform']} release "
              f"{lock['release']} sha256 {lock['sha256']} ({lock['default_arch_list']})")  # fmt: skip
    print(f"{'subscription':28} {'variants':16} {'cells':>5} {'jobs':>4} {'wall h':>7} {'build-h':>8} {'USD':>7}  goal")
    for r in rows:
        met = "met" if r[f"meets_{args.goal_hours:g}h"] else "NOT met"
        print(f"{r['subscription']:28} {r['variants']:16} {r['cells']:>5} {r['jobs']:>4} {r['wall_hours']:>7.2f} "
              f"{r['build_hours']:>8.2f} {r['usd']:>7.2f}  {met} ({args.goal_hours:g} h)")  # fmt: skip
    note = "" if upstream.pytorch_index_read else (  # what an unreachable index leaves unknown
        "PyTorch's index was not reachable: the CUDA variants known are PyPI's build only (and CPU, assumed); "
        "its cu126/cu128/cu130-style variants would add cells (and jobs: one or more per toolkit)"
    )  # fmt: skip
    if "aarch64" in release.platforms:  # the watcher reads the x86_64 wheel's METADATA only: its CUDA is unknown
        note += "; PyPI also has aarch64 wheels of it, whose variant is not read here: x86_64 cells only"
    if note:
        print(f"note: {note}")
    out = ROOT / "bench" / "results" / f"release_day_plan-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    record = {"torch": release.version, "pythons": " ".join(python), "variants": " ".join(variants),
              "pytorch_index_read": upstream.pytorch_index_read, "note": note, "goal_hours": args.goal_hours,
              "seconds": round(time.monotonic() - started, 1), "cpus": os.cpu_count(), "toolkit_lock": lock,
              "rows": rows}  # fmt: skip
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
