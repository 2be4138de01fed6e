"""The heavy tests' cost in the gate, before and after: prints a table and writes bench/results/gate_heavy-<UTC>.json.

    .venv/bin/python bench/gate_heavy.py --before BEFORE.json --after test-heavy.xml [--after-warm test-heavy.xml]
        [--label "fresh clone, empty caches"] [--label-warm "fresh clone, caches kept"]

BEFORE: a tests/durations.json of an earlier commit (node id -> seconds; `git show REV:tests/durations.json`);
AFTER: the JUnit report(s) `make test-heavy` wrote under `.ci/run`'s JUNIT_DIR. A test's seconds are its
setup, call and teardown (pytest's JUnit time), so a module fixture's build counts against the test that
made it. Tests that went away (folded into another) are listed with what now covers them.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.test_durations import read  # noqa: E402

# What made a test cheaper (or where a removed test's point now lives), by node id prefix: prose for the
# table, not a figure. Not per test: every whole run's EC2 jobs stopped waiting 10 s for the emulated SSM
# agent (printed under the table); where a row shows no other change, that and the machine's load are all.
WHY = {
    "tests/buildspecs/test_nvcc_pool.py": "fixture .cu files without torch headers; the tail file 450 kernels, not "
    "600; one build, not a --threads 1 reference beside it (test_nvcc_threads.py holds thread counts to one wheel)",
    "tests/buildspecs/test_nvcc_threads.py::test_a_pyg_layout": "fixture .cu files without torch headers; two folders "
    "(takes over the no-ninja reproducibility test)",
    "tests/local/test_reproducible_cuda.py::test_a_cuda_cell_built_without_ninja": "removed: the PyG-layout test "
    "builds without ninja from two folders",
    "tests/local/test_reproducible_runs.py": "one example (the merged two-release one), not two; its vecops.cpp "
    "includes ATen's tensor and torch's pybind11 caster, not torch/extension.h (about 23 CPU-s of g++ a cell, not "
    "52: bench/unit_costs.py)",
    "tests/workflow/test_merged.py::test_a_package_whose": "vecops.cpp includes ATen's tensor and torch's pybind11 "
    "caster, not torch/extension.h (about 23 CPU-s of g++, not 52: bench/unit_costs.py)",
    "tests/buildspecs/test_memory_limits.py::test_a_cell_interrupted": "compared with the module's full build, not "
    "a third cold one; units of ATen's headers and torch's pybind11 caster, not torch/extension.h (0.95 GiB and "
    "13 s of cc1plus each, not 1.5 GiB and 27 s)",
    "tests/buildspecs/test_memory_limits.py::test_units_needing": "takes over the interrupted-cell test and the "
    "one-compiler-at-a-time test: the spot instance's build, interrupted and relaunched, is the one planned by the "
    "recorded peak in the instance's memory (the four units built once, not twice)",
    "tests/buildspecs/test_memory_limits.py::test_units_that_together": "removed: its one-compiler-at-a-time build "
    "is test_units_needing...'s interrupted and relaunched one",
    "tests/buildspecs/test_memory_limits.py": "the module fixture (the unlimited build) once: --dist loadfile "
    "(loadgroup split the module); units of ATen's headers and torch's pybind11 caster, not torch/extension.h "
    "(0.95 GiB and 13 s of cc1plus each, not 1.5 GiB and 27 s)",
    "tests/buildspecs/test_nvcc_threads.py::test_two_arch": "takes over the package's-own-threads test: its "
    "one-thread build has the package's --threads 4",
    "tests/buildspecs/test_nvcc_threads.py::test_a_packages_own": "removed: the two-architecture test's one-thread "
    "build has the package's --threads 4",
    "tests/container/": "a cell's torch environment made once per machine (/cache, read-only to the build), not "
    "installed by each job's env stage",
    "tests/container/test_container_cuda.py": "torch's CUDA environment made once per machine (/cache), not by each "
    "of its four env stages (42-49 s each); asserts both runs compiled and the second reused it. 543 s at 69ac175:"
    " the test bed's image tag hashed install_cuda.py's __pycache__ once bytecode caches were on, so the CUDA"
    " builder image was rebuilt mid-run (3ad7ab8 leaves bytecode out of the tags; 292 s alone, image kept)",
}
# A test renamed since BEFORE: its new node id -> the one BEFORE knows it by.
POOL = "tests/buildspecs/test_nvcc_pool.py::test_a_ninja_cells_cuda_files_share_the_compiler_caches_pool_and_"
MEMORY = "tests/buildspecs/test_memory_limits.py::test_"
MERGED, RESUMED = (
    "units_needing_more_memory_than_the_instance_has_compile_one_at_a_time_and_a_relaunch_compiles_the_rest",
    "a_cell_interrupted_mid_compile_and_relaunched_compiles_only_what_it_had_not_finished",
)
RENAMED = {
    f"{POOL}the_last_compiles_its_architectures_at_once": f"{POOL}give_the_one_thread_wheel",
    f"{MEMORY}{MERGED}": f"{MEMORY}{RESUMED}",
}
NOTE = (
    "every whole run's EC2 jobs: no 10 s wait for the emulated SSM agent (Online at launch); every whole run's"
    " end looked for every 0.05 s growing to 0.5 s, not every 0.05 s (about 2 CPU-s of 31 in one test); every"
    " CUDA cell's env stage reads torch's CUDA from torch/version.py, not by importing torch (4-5 s); every"
    " deploy of the template 1.5 CPU-s, not 3.1 (libyaml; moto's stack reads the JSON it is given as JSON);"
    " every extension build runs setup.py once, not twice (wfbuild.wheels.wheel_build calls build_wheel alone, where"
    " pip wheel asked for metadata first: a torch import less per build); bytecode caches on in every test"
    " process (the Makefile unexports PYTHONDONTWRITEBYTECODE: an import torch 3.4 s, not 5-7); every deploy"
    " after a worker's first reuses the state machine's syntax tree (its functions' and documents' names no"
    " longer random), and no EC2 backend builds moto's 1,100 ECS images (wheelfoundry_local.moto_pace)"
)


def why(node: str) -> str:
    best = max((p for p in WHY if node.startswith(p)), key=len, default="")
    return WHY.get(best, "")


def reports(paths: list[Path]) -> dict[str, float]:
    seen: dict[str, float] = {}
    for path in paths:
        seen.update(read(path))
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, nargs="+", required=True)
    parser.add_argument("--after-warm", type=Path, nargs="*", default=[])
    parser.add_argument("--label", default="after")
    parser.add_argument("--label-warm", default="after, caches kept")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    before = json.loads(args.before.read_text())
    after, warm = reports(args.after), reports(args.after_warm)
    removed = {n for n in before if any(n.startswith(p) for p in WHY if "removed" in WHY[p])}
    heavy = sorted(set(after) | set(warm) | removed)
    rows = []
    for node in heavy:
        old = RENAMED.get(node, "")  # the old id's own row, where a report still has it, keeps its figure
        was = before.get(node, None if old in heavy else before.get(old))
        rows.append({"test": node, "before": was, "after": after.get(node), "warm": warm.get(node),
                     "why": why(node)})  # fmt: skip
    rows.sort(key=lambda r: -(r["before"] or 0.0))
    cols = f"| test | before s | {args.label} s |" + (f" {args.label_warm} s |" if warm else "") + " what changed |"
    print(cols)
    print("|---|---:|---:|" + ("---:|" if warm else "") + "---|")

    def fmt(value: float | None) -> str:
        return "—" if value is None else f"{value:.0f}"

    for r in rows:
        name = r["test"].replace("tests/", "", 1)
        extra = f" {fmt(r['warm'])} |" if warm else ""
        print(f"| {name} | {fmt(r['before'])} | {fmt(r['after'])} |{extra} {r['why']} |")
    total_before = sum(r["before"] or 0.0 for r in rows)
    totals = {"before": total_before, "after": sum(after.values()), "warm": sum(warm.values()) if warm else None}
    line = f"| **{len(after)} tests** | {totals['before']:.0f} | {totals['after']:.0f} |"
    print(line + (f" {totals['warm']:.0f} |" if warm else "") + " test-seconds (two workers share them) |")
    print(f"\nAlso: {NOTE}.")
    args.results.mkdir(parents=True, exist_ok=True)
    out = args.results / f"gate_heavy-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps({"labels": [args.label, args.label_warm], "totals": totals, "rows": rows}, indent=1))
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
