"""One multi-architecture CUDA cell on this machine: nvcc --threads off against on (compile-stage wall).

    .venv/bin/python bench/nvcc_threads.py [--source examples/extension | --torch-scatter] [--repeat 1]

Each run is a real `wheelfoundry local run` (embedded AWS, runner in host mode, the CUDA 13.0 toolkit from
the repository's lock under WF_CACHE_DIR): one cell, torch 2.14 / Python 3.11, TORCH_CUDA_ARCH_LIST 8.0;9.0.
"off" pins WF_NVCC_THREADS=1: the runner's choice before nvcc threads (MAX_JOBS = the cores). "on" lets the
runner balance (wfbuild.parallelism: here 2 threads x MAX_JOBS 1 on 2 cores). The figure is the cell's
build stage (the compile) from the job's log; the wheel's sha256 is printed beside it (the same both ways
when both runs build in one folder; local runs use a folder per instance, so it may differ here by nvcc's
path-derived anonymous-namespace names). --torch-scatter builds torch-scatter 2.1.2's sdist from PyPI
(pinned by sha256) instead of the example; --corpus NAME a package of examples/corpus/corpus.toml (its
sdist pinned there). The machine's load average is recorded beside each run: other
work on the cores inflates both figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# PyPI's torch-scatter 2.1.2 sdist (pip download torch-scatter==2.1.2 --no-binary :all:)
SCATTER_SHA256 = "69b3aa435f2424ac6a1bfb6ff702da6eb73b33ca0db38fb26989c74159258e47"
STAGE = re.compile(r"stage (build-torch[^:]*): succeeded in ([0-9.]+)s")
SLOTS = re.compile(r"cell\(s\), \d+ at a time, (MAX_JOBS=\d+ each, nvcc --threads \d+)")


def scatter_sdist(dest: Path) -> Path:
    """torch-scatter 2.1.2's sdist, through pip (PyPI's own client), checked against its pinned sha256."""
    argv = [sys.executable, "-m", "pip", "download", "torch-scatter==2.1.2", "--no-deps", "--no-binary", ":all:"]
    subprocess.run([*argv, "--no-build-isolation", "-d", str(dest)], check=True, capture_output=True)
    (sdist,) = dest.glob("torch_scatter-2.1.2.tar.gz")
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SCATTER_SHA256:
        raise SystemExit(f"{sdist.name}: sha256 {digest}, pinned {SCATTER_SHA256}")
    return sdist


def one_run(request: dict[str, Any], source: Path, threads: str | None, cwd: Path) -> dict[str, Any]:
    cwd.mkdir(parents=True)
    (cwd / "request.json").write_text(json.dumps(request))
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "CUDACXX", "WF_NVCC_THREADS")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p and not (Path(p) / "nvcc").exists())
    env |= {"WF_NVCC_THREADS": threads} if threads else {}
    argv = [sys.executable, "-m", "wheelfoundry_cli.main", "local", "run", "request.json", "--source", str(source)]
    load = os.getloadavg()[0]
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=7200, check=False)
    logs = [p.read_text(errors="replace") for p in (cwd / ".wf-local").glob("instances/*/logs/*.log")]
    # The build job's log (the test job of the published bytes logs its own cells' line too)
    log = next((text for text in logs if STAGE.search(text)), "\n".join(logs))
    stage = STAGE.search(log)
    slots = SLOTS.search(log)
    wheels = sorted((cwd / "dist").glob("*.whl"))
    if done.returncode != 0 or not stage:
        raise SystemExit(f"run failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}\n{log[-3000:]}")
    return {
        "mode": "on" if threads is None else f"WF_NVCC_THREADS={threads}",
        "parallelism": slots.group(1) if slots else "?",
        "compile_seconds": float(stage.group(2)),
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "wheel_sha256": hashlib.sha256(wheels[0].read_bytes()).hexdigest() if wheels else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=ROOT / "examples" / "extension")
    parser.add_argument("--torch-scatter", action="store_true", help="torch-scatter 2.1.2 from PyPI instead")
    parser.add_argument("--corpus", help="a package of examples/corpus/corpus.toml instead (its pinned sdist)")
    parser.add_argument("--arch-list", default="8.0;9.0")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("WF_CACHE_DIR", str(ROOT / ".wfcache"))
    with tempfile.TemporaryDirectory(prefix="wf-nvcc-threads-") as tmp:
        source, name = args.source.resolve(), "wf-example-ops"
        if args.torch_scatter:
            source, name = scatter_sdist(Path(tmp) / "sdist"), "torch-scatter"
        if args.corpus:
            sys.path.insert(0, str(ROOT))
            from tools.corpus import fetch_sdist
            from tools.corpus_steps import load_corpus

            (package,) = [p for p in load_corpus(ROOT / "examples/corpus/corpus.toml") if p.name == args.corpus]
            source, name = fetch_sdist(package, Path(os.environ["WF_CACHE_DIR"])), package.name
        request = {
            "framework": "extension", "name": name,
            "source": {"s3": "s3://replaced-by-local-run/sources/x.tar.gz"}, "torch": ["2.14"], "cuda": ["13.0"],
            "python": ["3.11"], "platforms": ["x86_64"], "arch_list": args.arch_list, "torch_index": "pip",
            "channel": "bench",
        }  # fmt: skip
        rows = []
        for n in range(args.repeat):  # off then on, alternating, so drifting load hits both
            rows.append(one_run(request, source, "1", Path(tmp) / f"off{n}"))
            rows.append(one_run(request, source, None, Path(tmp) / f"on{n}"))
    off = statistics.median(r["compile_seconds"] for r in rows if r["mode"] != "on")
    on = statistics.median(r["compile_seconds"] for r in rows if r["mode"] == "on")
    print(f"{name}, CUDA 13.0, TORCH_CUDA_ARCH_LIST={args.arch_list}, {os.cpu_count()} cores")
    print(f"{'mode':20} {'runner chose':34} {'compile s':>9} {'load before/after':>17}  wheel sha256")
    for r in rows:
        load = f"{r['load_before']:.2f}/{r['load_after']:.2f}"
        sha = (r["wheel_sha256"] or "-")[:16]
        print(f"{r['mode']:20} {r['parallelism']:34} {r['compile_seconds']:>9.1f} {load:>17}  {sha}")
    print(f"median compile: off {off:.1f} s, on {on:.1f} s: on/off = {on / off:.2f}x (target <= 0.65x)")
    out = ROOT / "bench" / "results" / f"nvcc_threads-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    summary = {"package": name, "arch_list": args.arch_list, "cpus": os.cpu_count(), "rows": rows, "ratio": on / off}
    out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
