"""One ninja-off cell, serial against parallel; then a several-cell extension request, planned before and after.

    .venv/bin/python bench/parallel_compile.py [--jobs N] [--cells N]

Part 1 builds examples/extension-ninja-off (wf-segops: one Extension of four translation units, each
including torch's headers, ``BuildExtension.with_options(use_ninja=False)``, as the PyG packages build)
with the farm's compile stage (build-library.sh under wfbuild.cpu_usage, the cached torch 2.13.0 build
environment, a fresh copy of the source each time in the same folder), first with MAX_JOBS=1 (what
setuptools did before: one compiler at a time) and then with MAX_JOBS=<this machine's cores>
(wfbuild.parallel_compile). It prints the compile stage's wall seconds, CPU seconds and cores busy
(CPU / wall / cores), and whether the two wheels are the same bytes.

Part 2 plans a request of --cells CPU cells of the same source twice: as the planner did before (the
config's extension instance, no recorded usage) and with the parallel build's record (the manifest's
``compile_usage``), and prints instance, cells at once, expected cores busy, wall hours and
instance-hours of the compile work. Writes bench/results/parallel_compile-<UTC>.json.
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

from wfbuild import cpu_usage  # noqa: E402

EXAMPLE = ROOT / "examples" / "extension-ninja-off"
PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"


def build_env(cache: Path, dest: Path) -> Path:
    argv = [sys.executable, "-m", "wfbuild.envs", "--python", PYTHON, "--dest", str(dest), "--torch", "torch==2.13.0"]
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
            [sys.executable, "-m", "wfbuild.cpu_usage", "--out", str(record), "--", *argv],
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
    """Before: serial cells on the configured instance; after: parallel cells on the instance sized by them."""
    from wheelfoundry.config import load_config
    from wheelfoundry.usage import RecordedUsage, default_sizing, size_extension

    config = load_config()

    def usage(record: dict[str, Any]) -> RecordedUsage:
        width = record["cpu_seconds"] / record["wall_seconds"]
        return RecordedUsage(
            "examples/extension-ninja-off", record["cpu_seconds"], record["wall_seconds"], record["cores"], 1, width
        )

    rows = []
    for label, sizing in (
        ("before (config)", default_sizing(cells, "x86_64", "cpu", config, usage(serial))),
        ("after (recorded)", size_extension(cells, usage(parallel), "x86_64", "cpu", config)),
    ):
        rows.append({"plan": label, **sizing.as_dict()})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=cpu_usage.cores())
    parser.add_argument("--cells", type=int, default=6)
    args = parser.parse_args()
    cache = Path(os.environ.get("WF_CACHE_DIR") or ROOT / ".wfcache")
    load = os.getloadavg()
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
        f"\n{'REQUEST OF ' + str(args.cells) + ' CELLS':<20}{'INSTANCE':<14}{'AT ONCE':>8}{'BUSY':>7}"
        f"{'WALL h':>9}{'INSTANCE-h':>12}{'USD':>8}"
    )
    for row in rows:
        print(
            f"{row['plan']:<20}{row['instance']:<14}{row['parallel_cells']:>8}{row['cores_busy']:>7.2f}"
            f"{row['wall_hours']:>9.3f}{row['instance_hours']:>12.3f}{row['usd']:>8.3f}"
        )
    result = {"load_average": load, "serial": serial, "parallel": parallel, "ratio": round(ratio, 3), "plans": rows}
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = ROOT / "bench" / "results" / f"parallel_compile-{stamp}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {out.relative_to(ROOT)}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
