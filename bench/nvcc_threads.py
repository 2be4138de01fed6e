"""One multi-architecture CUDA cell on this machine: nvcc --threads off against on (compile-stage wall).

    .venv/bin/python bench/nvcc_threads.py [--source DIR | --corpus NAME]
        [--arch-list "7.5;8.0;8.6;9.0;10.0;12.0+PTX"] [--repeat 1] [--also 3] [--rows off,on,serial]

Each run is a real `wheelfoundry local run` (embedded AWS, runner in host mode, the CUDA 13.0 toolkit from
the repository's lock under WF_CACHE_DIR, the job's compiler cache cold): one cell, torch 2.14 / Python
3.11, TORCH_CUDA_ARCH_LIST 8.0;9.0 unless --arch-list names another. "off" pins WF_NVCC_THREADS=1: the
runner's choice before nvcc threads (MAX_JOBS = the cores). "on" lets the runner balance
(wfbuild.compiling.parallelism: the example's one .cu file on 2 cores gets MAX_JOBS 2 and 2 threads); --also N adds
a row with the threads pinned to N. The figure is the cell's build stage from the job's log, split into
the seconds in which a cicc or ptxas ran (nvcc's per-architecture steps, what --threads spreads over the
cores; /proc sampled every 0.2 s) and the rest; the wheel's sha256 is printed beside it (the same every
way: wfbuild.wheels.reproducible). --corpus NAME builds a package of examples/corpus/corpus.toml (its PyPI sdist,
pinned there) instead of the example: `--corpus torch-scatter` is the PyG layout, one extension per .cu
file built one after another without ninja, whose CUDA units wfbuild.compiling.parallel_compile gives the threads
of a .cu file alone (the "per step" part of the column, from the build's own summary line), and whose
extensions that share no object file build side by side (their chains in the column); the "serial" row
(--rows) keeps setuptools' loop, one extension after another (WF_EXTENSION_CHAINS=off): the runner before
that. The machine's load average is recorded beside each run: other work on the cores inflates the figures.
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
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STAGE = re.compile(r"stage (build-torch[^:]*): succeeded in ([0-9.]+)s")
DEVICE_STEPS = {"cicc", "ptxas"}  # nvcc's per-architecture steps: the work --threads spreads over cores
PERIOD = 0.2
SLOTS = re.compile(r"cell\(s\), \d+ at a time, (MAX_JOBS=\d+ each, nvcc --threads \d+)")
STEPS = re.compile(r"parallel compile: .*compilers at once, nvcc (--threads [0-9/]+) for CUDA units")
CHAINS = re.compile(r"parallel compile: .*?(\d+ extensions in \d+ chains) side by side")
POOLED = "the compiler cache's pool keeps the compilers at once"
# Device-heavy packages the corpus (CPU builds, run by CI) cannot hold, pinned by PyPI's sha256. causal-
# conv1d 1.7.0 (Dao-AILab; mamba-ssm's dependency): one ninja extension of three .cu files, whose setup.py
# writes its own -gencode list (9 architectures for CUDA 13.0, TORCH_CUDA_ARCH_LIST unused) and whose
# causal_conv1d_bwd.cu outlasts the rest: the tail that nvcc threads fill. Its bdist_wheel downloads a
# prebuilt wheel from GitHub unless CAUSAL_CONV1D_FORCE_BUILD=TRUE (a request's build_env).
SUBJECTS: dict[str, dict[str, Any]] = {
    "causal-conv1d": {
        "version": "1.7.0",
        "import": "causal_conv1d",
        "url": "https://files.pythonhosted.org/packages/f4/d1/eba27735f31bd5527d39a3c7f693e6ded7b844cab275db719a15ad37b6cd/causal_conv1d-1.7.0.tar.gz",
        "sha256": "3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b",
        "license": "BSD-3-Clause",
        "build_env": {"CAUSAL_CONV1D_FORCE_BUILD": "TRUE"},
    },
}


class DeviceSampler(threading.Thread):
    """When nvcc's per-architecture steps run on this machine: ``/proc/*/comm`` every PERIOD seconds."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.busy = 0  # samples that saw a device step running
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(PERIOD):
            self.busy += any(_comm(pid) in DEVICE_STEPS for pid in filter(str.isdigit, os.listdir("/proc")))

    def device_seconds(self) -> float:
        """Seconds with at least one device step running: the run compiles only in its build stage."""
        return PERIOD * self.busy


def _comm(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""  # exited while listed


def one_run(
    request: dict[str, Any], source: Path, threads: str | None, cwd: Path, serial: bool = False
) -> dict[str, Any]:
    cwd.mkdir(parents=True)
    (cwd / "request.json").write_text(json.dumps(request))
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "CUDACXX", "WF_NVCC_THREADS")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p and not (Path(p) / "nvcc").exists())
    env |= {"WF_NVCC_THREADS": threads} if threads else {}
    env |= {"WF_EXTENSION_CHAINS": "off"} if serial else {}  # setuptools' loop: one extension after another
    argv = [sys.executable, "-m", "wheelfoundry_cli.main", "local", "run", "request.json", "--source", str(source)]
    load = os.getloadavg()[0]
    sampler = DeviceSampler()
    sampler.start()
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=7200, check=False)
    finally:
        sampler.done.set()
        sampler.join()
    logs = [p.read_text(errors="replace") for p in (cwd / ".wf-local").glob("instances/*/logs/*.log")]
    # The build job's log (the test job of the published bytes logs its own cells' line too)
    log = next((text for text in logs if STAGE.search(text)), "\n".join(logs))
    stage = STAGE.search(log)
    slots, steps, chains = SLOTS.search(log), STEPS.search(log), CHAINS.search(log)
    wheels = sorted((cwd / "dist").glob("*.whl"))
    if not stage:
        raise SystemExit(f"run failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}\n{log[-3000:]}")
    if done.returncode != 0:  # a later stage: the compile figure stands, the failure is recorded beside it
        print(f"warning: the run failed after its build stage ({done.returncode}):\n{done.stdout[-1500:]}")
    seconds, device = float(stage.group(2)), round(sampler.device_seconds(), 1)
    return {
        "mode": ("serial" if serial else "on") if threads is None else f"WF_NVCC_THREADS={threads}",
        "parallelism": (slots.group(1) if slots else "?")
        + ("; pooled" if POOLED in log else "")
        + (f"; per step {steps.group(1)}" if steps else "")
        + (f"; {chains.group(1)}" if chains else ""),
        "compile_seconds": seconds,
        # the stage's seconds with a cicc or ptxas running, and the rest (host compiles, cudafe++, pip)
        "device_step_seconds": device,
        "other_seconds": round(seconds - device, 1),
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "wheel_sha256": hashlib.sha256(wheels[0].read_bytes()).hexdigest() if wheels else None,
        "run_exit_status": done.returncode,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=ROOT / "examples" / "extension")
    parser.add_argument("--corpus", help="a package of examples/corpus/corpus.toml instead (its pinned sdist)")
    parser.add_argument("--subject", choices=sorted(SUBJECTS), help="a device-heavy PyPI package (SUBJECTS)")
    parser.add_argument("--arch-list", default="8.0;9.0")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--also", type=int, nargs="*", default=[], help="more rows: WF_NVCC_THREADS pinned to N")
    parser.add_argument(
        "--rows",
        default="off,on",
        help="off (--threads 1), on (the runner's choice), serial (on, extensions "
        "one after another: WF_EXTENSION_CHAINS=off, the runner before extensions built side by side)",
    )
    args = parser.parse_args()
    os.environ.setdefault("WF_CACHE_DIR", str(ROOT / ".wfcache"))
    with tempfile.TemporaryDirectory(prefix="wf-nvcc-threads-") as tmp:
        source, name = args.source.resolve(), "wf-example-ops"
        build_env: dict[str, str] = {}
        if args.corpus or args.subject:  # a pinned PyPI sdist, fetched and checked by the corpus's own code
            sys.path.insert(0, str(ROOT))
            from tools.corpus import fetch_sdist
            from tools.corpus_steps import Package, load_corpus

            if args.subject:
                pin = SUBJECTS[args.subject]
                package = Package(args.subject, pin["version"], pin["import"], pin["url"], pin["sha256"],
                                  pin["license"], ("module",), True, Path())  # fmt: skip
                build_env = pin["build_env"]
            else:
                corpus = load_corpus(ROOT / "examples/corpus/corpus.toml")
                (package,) = [p for p in corpus if p.name == args.corpus]
            source, name = fetch_sdist(package, Path(os.environ["WF_CACHE_DIR"])), package.name
        request = {
            "framework": "extension", "name": name,
            "source": {"s3": "s3://replaced-by-local-run/sources/x.tar.gz"}, "torch": ["2.14"], "cuda": ["13.0"],
            "python": ["3.11"], "platforms": ["x86_64"], "arch_list": args.arch_list, "torch_index": "pip",
            "channel": "bench",
        }  # fmt: skip
        if build_env:
            request["build_env"] = build_env
        rows = []
        wanted = args.rows.split(",")
        for n in range(args.repeat):  # the rows in turn, so drifting load hits each
            for row in wanted:
                threads = "1" if row == "off" else None
                rows.append(one_run(request, source, threads, Path(tmp) / f"{row}{n}", serial=row == "serial"))
            rows += [one_run(request, source, str(t), Path(tmp) / f"t{t}-{n}") for t in args.also]
    medians = {
        mode: statistics.median(r["compile_seconds"] for r in rows if r["mode"] == label)
        for mode, label in (("off", "WF_NVCC_THREADS=1"), ("on", "on"), ("serial", "serial"))
        if any(r["mode"] == label for r in rows)
    }
    print(f"{name}, CUDA 13.0, TORCH_CUDA_ARCH_LIST={args.arch_list}, {os.cpu_count()} cores")
    print(f"{'mode':20} {'runner chose':56} {'compile s':>9} {'device s':>8} {'other s':>7} {'load':>9}  wheel sha256")
    for r in rows:
        load = f"{r['load_before']:.2f}/{r['load_after']:.2f}"
        sha = (r["wheel_sha256"] or "-")[:16]
        split = f"{r['device_step_seconds']:>8.1f} {r['other_seconds']:>7.1f}"
        print(f"{r['mode']:20} {r['parallelism']:56} {r['compile_seconds']:>9.1f} {split} {load:>9}  {sha}")
    on = medians.get("on")
    if on and medians.get("off"):
        print(f"median compile: off {medians['off']:.1f} s, on {on:.1f} s: on/off = {on / medians['off']:.2f}x")
    if on and medians.get("serial"):
        print(
            f"extensions side by side: {on:.1f} s, one after another {medians['serial']:.1f} s: "
            f"{on / medians['serial']:.2f}x"
        )
    print("device s: the stage's seconds with a cicc or ptxas running (what --threads spreads over cores);")
    print("other s: the rest (pip and setup.py, the compiler cache's preprocessing, cudafe++, the host compile, link)")
    out = ROOT / "bench" / "results" / f"nvcc_threads-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    summary = {"package": name, "arch_list": args.arch_list, "cpus": os.cpu_count(), "rows": rows, "medians": medians}
    if on and medians.get("off"):
        summary["ratio"] = on / medians["off"]
    out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
