"""What one compile of each source unit the tests build costs on this machine: prints a table and writes
bench/results/unit_costs-<UTC>.json.

    .venv/bin/python bench/unit_costs.py [--cache DIR]

The gate is CPU-bound, and its compilers are about two fifths of its CPU (docs/development.md, "The gate").
A test's build cost is mostly the headers its units include, so this compiles, once each, every C++ and
CUDA unit the fixtures and examples hold, and a one-line unit per torch header they choose between, with
the flags torch's cpp_extension gives them (``-O2 -fPIC``, C++20 for torch 2.14's headers). Headers and
nvcc come from WF_CACHE_DIR: a torch 2.14.1+cu130 build environment the tests cached (wfbuild.envs; run
`make test-heavy` once first), and the locked CUDA 13.0 toolkit a torch 2.14 CUDA 13.0 cell gets
(wfbuild.cuda.toolkit.ensure with the planner's requirements: the tests' own, installed from the lock if
missing). CPU-s is the compiler's user and system time (nvcc: all its steps, one after another).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import runpy
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from wfbuild.cuda import toolkit
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request

ROOT = Path(__file__).resolve().parents[1]
TORCH = "2.14.1+cu130"
# (unit, the architecture a .cu unit is compiled for, what builds it in the gate); a "header:" unit is a file
# holding that one #include.
UNITS = (
    (
        "header:torch/extension.h",
        None,
        "examples/extension-ninja-off (test_memory_limits.py swaps it: ATen.h, pybind.h)",
    ),
    ("header:torch/python.h", None, "(torch/extension.h's pybind11 half)"),
    ("header:ATen/ATen.h", None, "tests/fixtures/pyg_cuda_ext, tests/fixtures/pathload_ext, test_memory_limits.py"),
    ("header:torch/csrc/utils/pybind.h", None, "examples/extension-package, test_memory_limits.py's units"),
    ("header:torch/library.h", None, "examples/extension"),
    ("examples/extension/csrc/ops.cpp", None, "the demo's package: every CPU and CUDA cell of it"),
    ("examples/extension/csrc/ops_cuda.cu", "90", "every CUDA cell of the demo's package (sm_90)"),
    ("examples/extension-package/csrc/vecops.cpp", None, "test_reproducible_runs.py (4 cells), test_merged.py"),
    ("examples/extension-ninja-off/csrc/segment_sum.cpp", None, "bench/parallel_compile.py (4 such units)"),
    ("tests/fixtures/pyg_cuda_ext/csrc/scale_ops.cpp", None, "test_nvcc_threads.py, test_nvcc_pool.py"),
    ("tests/fixtures/pyg_cuda_ext/csrc/scale_cuda.cu", "80", "the same, each CUDA cell (sm_80)"),
    ("tests/fixtures/pathload_ext/csrc/ops.cpp", None, "test_published.py"),
    ("tests/fixtures/tiny_ext/src/kernel.cu", "89", "the whole-run tests' CUDA cells (sm_89)"),
)
# A CUDA 13.0 cell for torch 2.14 on x86_64, as the tests build them: the planner names its toolkit's
# requirements (the catalog's for torch and CUDA, whatever the package).
CUDA_REQUEST = ROOT / "examples" / "requests" / "torchsort-cuda.json"


def torch_include(cache: Path) -> Path | None:
    for version in sorted(cache.glob("envs/*/lib/python3*/site-packages/torch/version.py")):
        if runpy.run_path(str(version)).get("__version__") == TORCH:  # wfbuild.envs reads it the same way
            return version.parent / "include"
    return None


def cuda_home(cache: Path) -> Path:
    (job,) = plan_request(parse_request(json.loads(CUDA_REQUEST.read_text())), load_catalog(), load_config()).jobs
    return toolkit.ensure(ROOT / "buildspecs", "13.0", "x86_64", toolkit.requirements_of(job.to_dict()), cache)


def cpu_seconds(argv: list[str], cwd: Path) -> float | str:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        return f"failed: {(done.stderr.strip().splitlines() or ['?'])[-1][:120]}"
    return round((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get("WF_CACHE_DIR", "")))
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    include = torch_include(args.cache)
    gxx = shutil.which("g++")
    if include is None or gxx is None:
        print(f"{args.cache}: needs a torch {TORCH} environment in the cache (run `make test-heavy` with "
              f"WF_CACHE_DIR set), and g++ on PATH", file=sys.stderr)  # fmt: skip
        return 2
    cuda = cuda_home(args.cache)
    flags = ["-I", str(include), "-I", str(include / "torch" / "csrc" / "api" / "include")]
    flags += ["-I", sysconfig.get_paths()["include"], "-DTORCH_EXTENSION_NAME=_C", "-O2", "-w"]
    rows = []
    print("| unit | CPU-s | built by |\n|---|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for unit, arch, built_by in UNITS:
            if unit.startswith("header:"):
                source = Path(tmp) / "header.cpp"
                source.write_text(f"#include <{unit.removeprefix('header:')}>\n")
            else:
                source = ROOT / unit
            if arch:
                argv = [str(cuda / "bin" / "nvcc"), "-std=c++20", f"-gencode=arch=compute_{arch},code=sm_{arch}"]
                argv += ["-Xcompiler", "-fPIC", "-I", str(cuda / "include"), *flags]
            else:
                argv = [gxx, "-std=c++20", "-fPIC", *flags]
            cost = cpu_seconds([*argv, "-c", str(source), "-o", "unit.o"], Path(tmp))
            rows.append({"unit": unit, "cpu_s": cost, "built_by": built_by})
            print(f"| {unit} | {cost} | {built_by} |", flush=True)
    args.results.mkdir(parents=True, exist_ok=True)
    out = args.results / f"unit_costs-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    meta = {"torch": TORCH, "nvcc": cuda.name, "cores": len(os.sched_getaffinity(0))}
    out.write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
