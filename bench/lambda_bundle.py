"""The Lambda bundle: its zipped size and the cold import time of every handler module.

    .venv/bin/python bench/lambda_bundle.py [--requirements functions/requirements.txt] [--runs 5]

Bundle: what `sam build` packages for a function of template.yaml (Globals CodeUri `functions/`):
the CodeUri folder plus `pip install -r requirements.txt` into it, for the functions' runtime and
architecture (python3.12, arm64: `--platform manylinux2014_aarch64 --only-binary=:all:`), zipped with
deflate as `sam package` does. SAM CLI is not installed here (`make sam` would fetch it), so this
builds the same artefact with pip directly. Powertools and aws-xray-sdk are not in it: AWS's
Powertools layer provides them (template.yaml Globals Layers); boto3 comes with the runtime.
`--requirements` builds another list (e.g. the old one, `git show HEAD~1:functions/requirements.txt`).

Import time: each handler module named in template.yaml, imported in a fresh interpreter of this
venv (Python 3.11 here, 3.12 on Lambda) with the function's Powertools variables and
AWS_LAMBDA_FUNCTION_NAME set (as on Lambda): the wall time of `python -c "import <module>"` minus
that of `python -c pass`, its CPU time likewise (what other load on a shared machine barely moves),
and the module's cumulative time from `-X importtime`; the minimum of --runs runs, with the load
average at start and end. Goal: bundle <= 5 MB, every handler <= 300 ms (wall). A handler that imports inside its
function (validate: the planner) only moves that cost to its first call, so the column
"+ first call" also imports those modules: the cold start's import cost in all.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUNDLE_GOAL_MB = 5.0
IMPORT_GOAL_MS = 300.0
sys.path.insert(0, str(ROOT))  # run as a script: the lock tool's definitions of what the bundle leaves out
from tools.lock_lambda_requirements import LAYER_PROVIDED, RUNTIME_PROVIDED, canonical  # noqa: E402

LAMBDA_ENV = {
    "AWS_LAMBDA_FUNCTION_NAME": "bench",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "POWERTOOLS_SERVICE_NAME": "wheelfoundry",
    "POWERTOOLS_METRICS_NAMESPACE": "WheelFoundry",
    "POWERTOOLS_LOG_LEVEL": "INFO",
    "WF_STACK_NAME": "wheelfoundry",
    "WF_BUCKET": "bench-bucket",
}


def handler_modules(template: Path) -> list[str]:
    """The handler modules of the functions whose code is `functions/` (the Globals CodeUri)."""
    text = template.read_text()
    return sorted({m for m in re.findall(r"Handler:\s*(wheelfoundry\.[\w.]+)\.handler", text)})


def build_bundle(dest: Path, requirements: Path) -> None:
    """functions/ plus its requirements, for python3.12 on arm64, as `sam build` lays it out."""
    shutil.copytree(ROOT / "functions", dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",
            "--target",
            str(dest),
            "--platform",
            "manylinux2014_aarch64",
            "--implementation",
            "cp",
            "--python-version",
            "3.12",
            "--only-binary=:all:",
            "-r",
            str(requirements),
        ],
        check=True,
    )


def zip_size(folder: Path) -> tuple[int, int]:
    """(zipped bytes, unzipped bytes) of a folder, deflated."""
    with tempfile.TemporaryFile() as handle:
        unzipped = 0
        with zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                archive.write(path, path.relative_to(folder).as_posix())
                unzipped += path.stat().st_size
        handle.seek(0, os.SEEK_END)
        return handle.tell(), unzipped


def shipped_distributions(folder: Path) -> list[str]:
    names = []
    for info in folder.glob("*.dist-info"):
        name = info.name.removesuffix(".dist-info").rsplit("-", 1)[0]
        names.append(canonical(name))
    return sorted(names)


def _run(code: str, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of `python -c code`. The CPU time (user + system) barely moves when other
    processes share the cores, the wall time does: on this shared machine it tells noise from cost."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


# What every handler pays before any of this project's code: boto3 (the runtime's) and Powertools'
# Logger and Metrics (the layer's), as handlers/runtime.py creates them (no Tracer: its docstring).
FLOOR = "import boto3\nfrom aws_lambda_powertools import Logger, Metrics\nLogger(); Metrics()"


def deferred_imports(module: str) -> list[str]:
    """The modules a handler imports inside a function: loaded at its first call, not at init."""
    tree = ast.parse((ROOT / "functions" / (module.replace(".", "/") + ".py")).read_text())
    top = {id(node) for node in tree.body}
    names = set()
    for node in ast.walk(tree):
        if id(node) in top:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return sorted(names)


def import_times(module: str, runs: int) -> dict[str, Any]:
    env = {**os.environ, **LAMBDA_ENV, "PYTHONPATH": str(ROOT / "functions"), "PYTHONDONTWRITEBYTECODE": "1"}
    best_wall, best_cpu, best_cumulative, best_first = float("inf"), float("inf"), float("inf"), float("inf")
    code = FLOOR if module == "floor" else f"import {module}"
    deferred = [] if module == "floor" else deferred_imports(module)
    for _ in range(runs):
        base_wall, base_cpu = _run("pass", env)
        wall, cpu = _run(code, env)
        best_wall, best_cpu = min(best_wall, wall - base_wall), min(best_cpu, cpu - base_cpu)
        if deferred:
            first = _run("\n".join([code, *(f"import {d}" for d in deferred)]), env)[0]
            best_first = min(best_first, first - base_wall)
        if module == "floor":
            continue
        out = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import {module}"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stderr
        line = [ln for ln in out.splitlines() if ln.rstrip().endswith(f"| {module}")][-1]
        best_cumulative = min(best_cumulative, int(line.split("|")[1]) / 1000)
    cumulative = None if module == "floor" else round(best_cumulative, 1)
    wall = round(best_wall * 1000, 1)
    first = round(best_first * 1000, 1) if deferred else wall
    cpu = round(best_cpu * 1000, 1)
    return {"wall_ms": wall, "cpu_ms": cpu, "importtime_ms": cumulative, "deferred": deferred, "first_call_ms": first}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requirements", type=Path, default=ROOT / "functions" / "requirements.txt")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-imports", action="store_true", help="measure only the bundle")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        bundle = Path(tmp) / "bundle"
        build_bundle(bundle, args.requirements.resolve())
        zipped, unzipped = zip_size(bundle)
        dists = shipped_distributions(bundle)
    provided = sorted(set(dists) & (RUNTIME_PROVIDED | LAYER_PROVIDED))
    result: dict[str, Any] = {
        "requirements": str(args.requirements),
        "bundle": {
            "zipped_bytes": zipped,
            "zipped_mb": round(zipped / 1e6, 2),
            "unzipped_mb": round(unzipped / 1e6, 2),
            "distributions": dists,
            "runtime_or_layer_provided_but_shipped": provided,
            "built_with": "pip install --target, manylinux2014_aarch64 cp312 (sam build's layout; SAM CLI absent)",
        },
        "imports": {},
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average_1min_at_start": round(os.getloadavg()[0], 2),
        "goal": {"bundle_mb": BUNDLE_GOAL_MB, "import_ms": IMPORT_GOAL_MS},
    }
    print(f"bundle ({args.requirements.name}): {zipped / 1e6:.2f} MB zipped, {unzipped / 1e6:.2f} MB unzipped")
    print(f"  distributions: {', '.join(dists)}")
    if provided:
        print(f"  provided by the runtime/layer but shipped anyway: {', '.join(provided)}")
    if not args.no_imports:
        floor_times = import_times("floor", args.runs)
        floor = floor_times["wall_ms"]
        result["floor_ms"], result["floor_cpu_ms"] = floor, floor_times["cpu_ms"]
        head = f"{'import (wall) ms':>17} {'cpu ms':>7} {'-X importtime ms':>17}"
        head += f" {'own code ms':>12} {'+ first call ms':>16}"
        print(f"\n{'handler module':40} {head}")
        print(f"{'(floor: boto3 + Logger + Metrics)':40} {floor:17.1f} {floor_times['cpu_ms']:7.1f}")
        for module in handler_modules(ROOT / "template.yaml"):
            times = import_times(module, args.runs)
            times["own_ms"] = round(max(times["wall_ms"] - floor, 0.0), 1)
            result["imports"][module] = times
            first = f"{times['first_call_ms']:16.1f}" if times["deferred"] else f"{'=':>16}"
            cells = f"{times['wall_ms']:17.1f} {times['cpu_ms']:7.1f} {times['importtime_ms']:17.1f}"
            cells += f" {times['own_ms']:12.1f} {first}"
            print(f"{module:40} {cells}")
    worst = max((t["wall_ms"] for t in result["imports"].values()), default=0.0)
    ok = zipped / 1e6 <= BUNDLE_GOAL_MB and worst <= IMPORT_GOAL_MS
    result["within_goal"] = ok
    verdict = "met" if ok else "NOT met"
    load = os.getloadavg()[0]
    result["load_average_1min_at_end"] = round(load, 2)
    print(f"\ngoal: bundle <= {BUNDLE_GOAL_MB} MB, each import <= {IMPORT_GOAL_MS:.0f} ms: {verdict} (load {load:.1f})")
    out = ROOT / "bench" / "results" / f"lambda_bundle-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
