"""Packed extension cells vs one cell at a time, and merged wheel size: prints a table, writes JSON.

    .venv/bin/python bench/packing.py [--torch 2.13 2.14] [--python 3.11 3.12] [--source examples/extension-package]

One embedded AWS, the shipped template and state machine, one extension request whose cells share
a builder image (so the planner packs them on one instance). A warm-up run fills the build-env
cache (torch installs), then the same request runs twice, measured: packed (the runner's own
choice of cells at once) and one cell at a time (WF_CELL_SLOTS=1). For each: the instance's busy
time (first stage start to last stage end, from manifest.json), CPU time of every build process
(getrusage of this process's children: the local SSM agent's runner and everything it starts),
cells per instance-hour, and core use = CPU / busy time / cores. The merged wheel's size is
compared with the sum of the cell wheels it was made from (runs/<id>/merge.json).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def find_interpreters(versions: list[str]) -> None:
    """WF_PYTHON_X_Y for Pythons that are not on PATH but in pyenv (the build envs need each one)."""
    for version in versions:
        name = "WF_PYTHON_" + version.replace(".", "_")
        on_path = shutil.which(f"python{version}")
        # A pyenv shim is on PATH even when that version is not selected: only a runnable one counts.
        if os.environ.get(name) or (on_path and subprocess.run([on_path, "-c", ""], check=False).returncode == 0):
            continue
        found = sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"))
        if found:
            os.environ[name] = str(found[-1])


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(aws: Any, stack: Any, request: dict[str, Any], slots: str | None) -> dict[str, Any]:
    from wheelfoundry_local.demo import run_request
    from wheelfoundry_local.progress import Progress

    if slots is None:
        os.environ.pop("WF_CELL_SLOTS", None)
    else:
        os.environ["WF_CELL_SLOTS"] = slots
    cpu0 = children_cpu()
    result = run_request(aws, stack, request, lambda _line: None, Progress(), 3600)
    cpu = children_cpu() - cpu0
    if not result.succeeded:
        raise SystemExit(f"run failed: {result.error}: {result.cause}")
    s3, bucket = aws.client("s3"), stack.outputs["WheelBucketName"]
    run_id = result.arn.rsplit(":", 1)[1]
    jobs = [j for j in s3.list_objects_v2(Bucket=bucket, Prefix=f"runs/{run_id}/jobs/")["Contents"]]
    (manifest_key,) = [o["Key"] for o in jobs if o["Key"].endswith("/manifest.json")]
    stages = json.loads(s3.get_object(Bucket=bucket, Key=manifest_key)["Body"].read())["stages"]
    timed = [s for s in stages if s.get("started_at")]
    busy = max(s["ended_at"] for s in timed) - min(s["started_at"] for s in timed)
    merged = json.loads(s3.get_object(Bucket=bucket, Key=f"runs/{run_id}/merge.json")["Body"].read())
    cells = sum(1 for s in stages if s["name"].startswith("build-"))
    cores = len(os.sched_getaffinity(0))
    return {
        "mode": "packed" if slots is None else f"{slots} cell at a time",
        "cells": cells,
        "busy_seconds": round(busy, 1),
        "cpu_seconds": round(cpu, 1),
        "cores": cores,
        "core_use": round(cpu / busy / cores, 3),
        "cells_per_instance_hour": round(cells / (busy / 3600), 1),
        "merged_wheels": merged["wheels"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch", nargs="+", default=["2.13", "2.14"])
    parser.add_argument("--python", nargs="+", default=["3.11", "3.12"])
    parser.add_argument("--source", type=Path, default=ROOT / "examples" / "extension-package")
    parser.add_argument("--name", default="wf-vecops")
    parser.add_argument("--state-dir", type=Path, help="keep the embedded AWS's state (logs, build envs) here")
    args = parser.parse_args()
    find_interpreters(args.python)
    for name in ("POWERTOOLS_METRICS_DISABLED", "POWERTOOLS_TRACE_DISABLED"):
        os.environ.setdefault(name, "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    from wheelfoundry_local import EmbeddedAws
    from wheelfoundry_local.demo import upload_source

    request: dict[str, Any] = {
        "framework": "extension",
        "name": args.name,
        "torch": args.torch,
        "cuda": ["cpu"],
        "python": args.python,
        "torch_index": "pip",
        "channel": "bench",
        "options": {"executor": "ec2", "spot": False},
    }
    with (
        tempfile.TemporaryDirectory() as tmp,
        EmbeddedAws(state_dir=args.state_dir or tmp, registration_delay=0.0) as aws,
    ):
        stack = aws.deploy(ROOT / "template.yaml", parameters={"BuildHeartbeatSeconds": "120"})
        request["source"] = {"s3": upload_source(aws, stack, args.source, args.name)}
        started = time.monotonic()
        measure(aws, stack, request, None)  # warm-up: build environments into the cache
        print(f"warm-up run (fills the build-env cache): {time.monotonic() - started:.0f}s", file=sys.stderr)
        rows = [measure(aws, stack, request, None), measure(aws, stack, request, "1")]
    print(f"{'mode':<20} {'cells':>5} {'busy s':>8} {'CPU s':>8} {'cores':>5} {'core use':>9} {'cells/inst-h':>13}")
    for r in rows:
        print(
            f"{r['mode']:<20} {r['cells']:>5} {r['busy_seconds']:>8} {r['cpu_seconds']:>8} {r['cores']:>5} "
            f"{r['core_use']:>9.2f} {r['cells_per_instance_hour']:>13}"
        )
    for wheel in rows[0]["merged_wheels"]:
        print(
            f"merged {wheel['filename']}: {wheel['size']} bytes for builds {', '.join(wheel['builds'])}; "
            f"the cell wheels together: {wheel['cells_size']} bytes ({wheel['size'] / wheel['cells_size']:.2f}x)"
        )
    out = ROOT / "bench" / "results" / f"packing-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps({"request": request, "rows": rows}, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
