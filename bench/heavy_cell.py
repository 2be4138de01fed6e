"""One heavy CUDA package from PyPI as one cell through `wheelfoundry local run`: compile time, each unit's
peak memory, the wheel's size, and the plan's estimates against them.

    .venv/bin/python bench/heavy_cell.py [--arch 9.0] [--keep-wheel DIR] [--work DIR]

The subject is mamba-ssm 2.3.2.post1 (state-spaces/mamba), its PyPI sdist pinned by sha256: one ninja
extension, ``selective_scan_cuda``, of a ``.cpp`` and nine ``.cu`` files (the selective scan's forward and
backward for fp32, fp16 and bf16, real and complex), the package people most often ask others to build for
them after flash-attention. It is built for torch 2.11 (PyPI's CUDA 13.0 wheel), CUDA 13.0 and Python 3.12
(the GPU check's machine), ``MAMBA_FORCE_BUILD=TRUE`` (else its bdist_wheel downloads a prebuilt wheel).

Two edits to the sdist, both said in the results (``patches``):
- the architectures: its setup.py writes its own ``-gencode`` list (nine for CUDA 13.0: 75 to 121) and reads
  no switch or TORCH_CUDA_ARCH_LIST, so for time on this 2-core machine the list is cut to the one the GPU
  check runs on (``--arch``, default 9.0: sm_90), the request's arch_list the same;
- the package's ``__init__`` imports its modules on first use (PEP 562) instead of at import: they import
  einops, transformers and triton kernels, which the farm's smoke test (the wheel installed beside the
  cell's torch, without its dependencies) does not have; the compiled module and every name stay.

Figures: the build stage's seconds and CPU seconds (the runner's log), each unit's peak resident memory and
the most compilers at once (the runner's memory watch, wfbuild.compiling.memwatch, one JSON line per compile stage in
the job's log), the wheel's bytes; against the plan's first-run estimate from the source's units
(wheelfoundry.planning.source_profile: compile core-hours, the job's hours), its memory per compiler (the model's,
until a run is recorded) and its predicted cell wheel. The table is printed and written to
bench/results/heavy_cell-<time>.json. The machine is shared: its load average is recorded beside the run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SUBJECT = {
    "name": "mamba-ssm",
    "version": "2.3.2.post1",
    "url": "https://files.pythonhosted.org/packages/af/48/aa7bec0efc7453fa0512276c0069c854bf684219050294266534bfef34bb/mamba_ssm-2.3.2.post1.tar.gz",
    "sha256": "104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028",
    "license": "Apache-2.0",
}
GENCODE = re.compile(r'cc_flag\.append\("arch=compute_(\d+),code=sm_\d+"\)')
LAZY_INIT = """__version__ = "{version}"

# bench/heavy_cell.py: the modules import on first use (PEP 562), not at import; the names are the same.
_NAMES = {names!r}


def __getattr__(name):
    import importlib

    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'mamba_ssm' has no attribute {{name!r}}")
"""
STAGE = re.compile(r"stage (build-torch[^:]*): succeeded in ([0-9.]+)s")
CPU = re.compile(r"compile stages: (\d+) CPU-s in (\d+) s on (\d+) cores")
RECORD = re.compile(r"compile memory record: (\S+) (\{.*\})")


def fetch(cache: Path) -> Path:
    dest = cache / "corpus" / SUBJECT["url"].rsplit("/", 1)[1]
    if not (dest.is_file() and hashlib.sha256(dest.read_bytes()).hexdigest() == SUBJECT["sha256"]):
        import urllib.request

        with urllib.request.urlopen(SUBJECT["url"], timeout=300) as response:
            body = response.read()
        if hashlib.sha256(body).hexdigest() != SUBJECT["sha256"]:
            raise SystemExit(f"{dest.name}: not PyPI's sha256 {SUBJECT['sha256']}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(body)
    return dest


def patched_source(sdist: Path, dest: Path, arch: str) -> tuple[Path, list[str]]:
    """The sdist unpacked with the two edits (module docstring); the edits, said."""
    with tarfile.open(sdist) as archive:
        archive.extractall(dest, filter="data")
    (top,) = list(dest.iterdir())
    setup = top / "setup.py"
    text = setup.read_text()
    want = arch.replace(".", "")
    kept = [m for m in GENCODE.finditer(text) if m.group(1) == want]
    if len(kept) != 1:
        raise SystemExit(f"setup.py: expected one -gencode for compute_{want}, found {len(kept)}")
    count = len(GENCODE.findall(text))
    # each -gencode is two appends: the flag, then its value; keep compute_<arch>'s pair only
    text = re.sub(r'cc_flag\.append\("-gencode"\)\n\s*(cc_flag\.append\("arch=compute_(\d+),code=sm_\d+"\))',
                  lambda m: m.group(0) if m.group(2) == want else "pass  # bench: architecture cut", text)  # fmt: skip
    if len(GENCODE.findall(text)) != 1:
        raise SystemExit("setup.py: the -gencode list was not cut as expected")
    setup.write_text(text)
    init = top / "mamba_ssm" / "__init__.py"
    names = {}
    for line in init.read_text().splitlines():
        found = re.match(r"from (mamba_ssm[\w.]*) import (.+)$", line)
        if found:
            names |= {n.strip(): found.group(1) for n in found.group(2).split(",")}
    init.write_text(LAZY_INIT.format(version=SUBJECT["version"], names=names))
    edits = [
        f"setup.py: {count} -gencode entries cut to compute_{want}/sm_{want} (setup.py reads no arch switch)",
        f"mamba_ssm/__init__.py: {len(names)} names imported on first use (PEP 562), not at import",
    ]
    return top, edits


def plan_estimate(request: dict[str, Any], source: Path) -> dict[str, Any]:
    """The plan's first run of this source: compile core-hours, the job's hours, memory, the cell wheel."""
    from wheelfoundry.catalog.catalog import load_catalog
    from wheelfoundry.config import load_config
    from wheelfoundry.planning.calibration import cell_cost
    from wheelfoundry.planning.planning import plan_request
    from wheelfoundry.planning.source_profile import from_path
    from wheelfoundry.request.request import parse_request

    catalog, config = load_catalog(), load_config()
    profile = from_path(source)
    plan = plan_request(parse_request(request, catalog, config), catalog, config, profile=profile)
    (job,) = plan.jobs
    cost = cell_cost(True, 1, config, None, profile)
    return {
        "profile": profile.describe(),
        "instance": job.instance.type,
        "executor": job.executor,
        "job_hours": job.estimate.hours,
        "compile_core_hours": cost.work,
        "serial_hours": cost.serial,
        "gib_per_compiler": float(job.env["WF_GIB_PER_COMPILE_JOB"]),
        "max_jobs": int(job.env["MAX_JOBS"]),
        "cell_wheel_bytes": job.extension.cell_wheel_bytes if job.extension else None,
        "notes": list(plan.notes),
    }


def build(request: dict[str, Any], source: Path, cwd: Path) -> dict[str, Any]:
    cwd.mkdir(parents=True)
    (cwd / "request.json").write_text(json.dumps(request))
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "CUDACXX")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p and not (Path(p) / "nvcc").exists())
    argv = [sys.executable, "-m", "wheelfoundry_cli.main", "local", "run", "request.json", "--source", str(source)]
    argv += ["--timeout", "43200"]
    load, started = os.getloadavg()[0], time.monotonic()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=46800, check=False)
    wall = time.monotonic() - started
    (cwd / "local-run.out").write_text(done.stdout + done.stderr)
    logs = [p.read_text(errors="replace") for p in (cwd / ".wf-local").glob("instances/*/logs/*.log")]
    log = next((text for text in logs if STAGE.search(text)), "\n".join(logs))
    stage, cpu = STAGE.search(log), CPU.search(log)
    if not stage:
        raise SystemExit(f"run failed ({done.returncode}): {done.stdout[-3000:]}{done.stderr[-2000:]}\n{log[-4000:]}")
    records = {m.group(1): json.loads(m.group(2)) for m in RECORD.finditer(log)}
    memory = next(iter(records.values()), {})
    wheels = sorted((cwd / "dist").glob("*.whl"))
    return {
        "exit_status": done.returncode,
        "run_wall_seconds": round(wall, 1),
        "compile_seconds": float(stage.group(2)),
        "compile_cpu_seconds": float(cpu.group(1)) if cpu else None,
        "memory": memory,
        "wheels": [
            {"name": w.name, "bytes": w.stat().st_size, "sha256": hashlib.sha256(w.read_bytes()).hexdigest()}
            for w in wheels
        ],
        "wheel_paths": [str(w) for w in wheels],
        "parallelism": next((ln.split("] ", 1)[1] for ln in log.splitlines() if "cell(s), " in ln), ""),
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """The result with ``figures`` (the plan against the actual, one record each) and ``units`` (each unit's
    peak): the tables docs/performance.md shows (tools/perf_docs.py)."""
    plan, run = result["plan"], result["run"]
    memory = run["memory"]
    wheel = run["wheels"][0]["bytes"] if run["wheels"] else None
    core_hours = round(run["compile_cpu_seconds"] / 3600, 3) if run["compile_cpu_seconds"] else None
    peak = round(memory.get("peak_unit_mib", 0) / 1024, 2)
    result["figures"] = [
        {"figure": "compile stage (s)", "plan": None, "actual": run["compile_seconds"]},
        {"figure": "compile core-hours", "plan": plan["compile_core_hours"], "actual": core_hours},
        {"figure": "job hours (the plan's on its instance; actual: this machine)", "plan": plan["job_hours"],
         "actual": round(run["run_wall_seconds"] / 3600, 3)},
        {"figure": "memory per compiler (GiB; plan: the model)", "plan": plan["gib_per_compiler"], "actual": peak},
        {"figure": "compilers at once", "plan": f"MAX_JOBS {plan['max_jobs']} on {plan['instance']}",
         "actual": f"{memory.get('compilers_at_once')} ({run['parallelism']})"},
        {"figure": "cell wheel (bytes; plan: the model)", "plan": plan["cell_wheel_bytes"], "actual": wheel},
    ]  # fmt: skip
    result["units"] = memory.pop("units", [])  # a table of its own
    return result


def table(result: dict[str, Any]) -> str:
    lines = [f"{'':58} {'plan':>22} {'actual':>40}"]
    lines += [f"{f['figure']:58} {f['plan']!s:>22} {f['actual']!s:>40}" for f in result["figures"]]
    lines.append("peak memory per unit:")
    lines += [f"  {u['unit']:52} {u['tool']:10} {u['peak_mib']:>7} MiB" for u in result["units"]]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="9.0", help="the one architecture to build (the GPU check's)")
    parser.add_argument("--keep-wheel", type=Path, default=ROOT / ".bench-wheels", help="where the wheel is kept")
    parser.add_argument("--work", type=Path, help="a folder for the run (default: a temporary one)")
    args = parser.parse_args()
    os.environ.setdefault("WF_CACHE_DIR", str(ROOT / ".wfcache"))
    sys.path[:0] = [str(ROOT / "functions")]
    work = Path(args.work or tempfile.mkdtemp(prefix="wf-heavy-cell-"))
    source, edits = patched_source(fetch(Path(os.environ["WF_CACHE_DIR"])), work / "src", args.arch)
    request = {
        "framework": "extension", "name": SUBJECT["name"], "source": {"s3": "s3://replaced-by-local-run/x.tar.gz"},
        "torch": ["2.11"], "cuda": ["13.0"], "python": ["3.12"], "platforms": ["x86_64"], "arch_list": args.arch,
        "torch_index": "pip", "channel": "bench", "build_env": {"MAMBA_FORCE_BUILD": "TRUE"},
        "options": {"executor": "ec2"},
    }  # fmt: skip
    result: dict[str, Any] = {"subject": SUBJECT, "patches": edits, "request": request, "cpus": os.cpu_count()}
    result["plan"] = plan_estimate(request, source)
    print(json.dumps(result["plan"], indent=1))
    result["run"] = build(request, source, work / "run")
    args.keep_wheel.mkdir(parents=True, exist_ok=True)
    for path in result["run"].pop("wheel_paths"):
        shutil.copy2(path, args.keep_wheel)
    print(table(summarize(result)))
    out = ROOT / "bench" / "results" / f"heavy_cell-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}; wheel kept in {args.keep_wheel}")
    return 0 if result["run"]["exit_status"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
