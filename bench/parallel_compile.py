"""One ninja-off cell, serial against parallel; then a several-cell extension request, planned before and after.

    .venv/bin/python bench/parallel_compile.py [--jobs N] [--cells N]

Part 1 builds examples/extension-ninja-off (wf-segops: one Extension of four translation units, each
including torch's headers, ``BuildExtension.with_options(use_ninja=False)``, as the PyG packages build)
with the farm's compile stage (build-library.sh under wfbuild.compiling.cpu_usage, the cached torch 2.13.0 build
environment, a fresh copy of the source each time in the same folder), first with MAX_JOBS=1 (what
setuptools did before: one compiler at a time) and then with MAX_JOBS=<this machine's cores>
(wfbuild.compiling.parallel_compile). It prints the compile stage's wall seconds, CPU seconds and cores busy
(CPU / wall / cores), and whether the two wheels are the same bytes.

Part 2 plans a request of --cells CPU cells of the same source three ways: by the catalog's model (no
run recorded), then with the serial build's and the parallel build's measurement recorded as Report
records them (wheelfoundry.planning.calibration: the cell's CPU seconds and width), and prints the instance, cells
at once, a cell's width, expected cores busy, the job's wall hours (one instance: also its
instance-hours) and dollars. Writes bench/results/parallel_compile-<UTC>.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "buildspecs"), str(ROOT / "functions")]

from wfbuild.compiling import cpu_usage  # noqa: E402

EXAMPLE = ROOT / "examples" / "extension-ninja-off"
PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"


def build_env(cache: Path, dest: Path) -> Path:
    argv = [
        sys.executable,
        "-m",
        "wfbuild.envs",
        "--python",
        PYTHON,
        "--dest",
        str(dest),
        "--torch",
        "torch==2.13.0",
    ]
    argv += ["--pip", "setuptools", "--pip", "wheel", "--pip", "ninja"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "buildspecs"), "WF_CACHE_DIR": str(cache)}
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return dest


def build(work: Path, env_dir: Path, jobs: int) -> dict[str, Any]:
    out = work / f"out-{jobs}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WF_", "MAX_JOBS", "CMAKE_BUILD"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")])
    env |= {
        "PYTHONPATH": str(ROOT / "buildspecs"),
        "WF_SRC_DIR": str(EXAMPLE),
        "WF_ENV_DIR": str(env_dir),
        "WF_OUT_DIR": str(out),
        "WF_VERSION_SCHEME": "git",
        "WF_BUILD_COPY": str(work / "copy"),
        "SOURCE_DATE_EPOCH": "1700000000",
        "MAX_JOBS": str(jobs),
    }
    record = work / f"usage-{jobs}.json"
    argv = ["bash", str(ROOT / "buildspecs" / "stages" / "build-library.sh")]
    with (work / f"build-{jobs}.log").open("w") as log:
        code = subprocess.run(
            [sys.executable, "-m", "wfbuild.compiling.cpu_usage", "--out", str(record), "--", *argv],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        ).returncode
    if code != 0:
        raise SystemExit(f"the build with MAX_JOBS={jobs} failed: see {work / f'build-{jobs}.log'}")
    usage = json.loads(record.read_text())
    (wheel,) = out.glob("*.whl")
    usage["cores_busy"] = round(usage["cpu_seconds"] / usage["wall_seconds"] / usage["cores"], 3)
    usage["sha256"] = hashlib.sha256(wheel.read_bytes()).hexdigest()
    usage["jobs"] = jobs
    return usage


def plans(cells: int, serial: dict[str, Any], parallel: dict[str, Any]) -> list[dict[str, Any]]:
    """A request of ``cells`` CPU cells of this source, planned three ways: by the catalog's model (no run
    recorded yet), with the serial build's measurement recorded, and with the parallel build's."""
    from wheelfoundry.catalog.catalog import load_catalog
    from wheelfoundry.config import load_config
    from wheelfoundry.planning import walltime
    from wheelfoundry.planning.calibration import cell_cost, cells_of
    from wheelfoundry.planning.planning import plan_request
    from wheelfoundry.request.request import parse_request

    catalog, config = load_catalog(), load_config()
    pythons = ["3.10", "3.11", "3.12", "3.13"]
    torches = ["2.11", "2.12", "2.13", "2.14"]
    request = {
        "framework": "extension",
        "name": "wf-segops",
        "source": {"s3": "s3://bench/wf_segops-0.1.0.tar.gz"},
        "torch": torches[: max(1, -(-cells // len(pythons)))],
        "cuda": ["cpu"],
        "python": pythons[: min(cells, len(pythons))],
        "options": {"executor": "ec2", "max_wall_hours": 4},
    }
    parsed = parse_request(request, catalog, config)
    first = plan_request(parsed, catalog, config).jobs[0].to_dict()
    cell = first["extension"]["cells"][0]["id"]

    def record(build: dict[str, Any]) -> dict[str, Any]:
        stage = {"name": f"build-{cell}", "group": cell, "status": "succeeded", "seconds": build["wall_seconds"]}
        stage["cpu_seconds"] = build["cpu_seconds"]
        # Both were given MAX_JOBS = the cores: before wfbuild.compiling.parallel_compile, setuptools ignored it.
        given = {"cells_at_once": 1, "max_jobs": parallel["jobs"], "nvcc_threads": 1}
        return {"cells": cells_of(first, {"stages": [stage], "parallelism": given}, config)}

    rows = []
    for label, rec in (("model", None), ("serial recorded", record(serial)), ("parallel recorded", record(parallel))):
        plan = plan_request(parsed, catalog, config, record=rec)
        cost = cell_cost(False, 1, config, rec)
        for job in plan.jobs:
            n = len(job.extension.cells) if job.extension else 0
            instance = config.instance_types[job.instance.type]
            slots = walltime.compile_slots(instance, n, False, 1, config, cost=cost)
            rows.append({
                "plan": label, "job": job.id, "cells": n, "instance": instance.name, "vcpus": instance.vcpus,
                "parallel_cells": slots.cells, "cell_width": slots.width,
                "cores_busy": walltime.cores_busy(instance, [n], [slots]),
                "wall_hours": job.estimate.hours, "usd": job.estimate.usd,
            })  # fmt: skip
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=cpu_usage.cores())
    parser.add_argument("--cells", type=int, default=6)
    parser.add_argument("--builds", type=Path, help="an earlier result's JSON: plan from its builds, build nothing")
    args = parser.parse_args()
    cache = Path(os.environ.get("WF_CACHE_DIR") or ROOT / ".wfcache")
    load = os.getloadavg()
    if args.builds:
        earlier = json.loads(args.builds.read_text())
        serial, parallel, load = earlier["serial"], earlier["parallel"], earlier["load_average"]
    else:
        with tempfile.TemporaryDirectory(prefix="wf-parallel-bench-") as tmp:
            work = Path(tmp)
            env_dir = build_env(cache, work / "env")
            serial, parallel = build(work, env_dir, 1), build(work, env_dir, args.jobs)
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {cpu_usage.cores()} cores")
    print(f"{'CELL BUILD':<22}{'MAX_JOBS':>9}{'WALL s':>9}{'CPU s':>9}{'CORES BUSY':>12}")
    for name, row in (("serial (before)", serial), ("parallel (after)", parallel)):
        print(
            f"{name:<22}{row['jobs']:>9}{row['wall_seconds']:>9.1f}{row['cpu_seconds']:>9.1f}{row['cores_busy']:>12.2f}"
        )
    ratio = parallel["wall_seconds"] / serial["wall_seconds"]
    same = serial["sha256"] == parallel["sha256"]
    print(
        f"parallel / serial wall: {ratio:.2f}x; wheels {'identical' if same else 'DIFFER'} ({parallel['sha256'][:16]})"
    )
    rows = plans(args.cells, serial, parallel)
    print(
        f"\n{'REQUEST OF ' + str(args.cells) + ' CELLS':<20}{'INSTANCE':<14}{'AT ONCE':>8}{'WIDTH':>7}{'BUSY':>7}"
        f"{'WALL = INSTANCE-h':>19}{'USD':>8}"
    )
    for row in rows:
        print(
            f"{row['plan']:<20}{row['instance']:<14}{row['parallel_cells']:>8}{row['cell_width']:>7.2f}"
            f"{row['cores_busy']:>7.2f}{row['wall_hours']:>19.2f}{row['usd']:>8.2f}"
        )
    result = {"load_average": load, "serial": serial, "parallel": parallel, "ratio": round(ratio, 3), "plans": rows}
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = ROOT / "bench" / "results" / f"parallel_compile-{stamp}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {out.relative_to(ROOT)}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
