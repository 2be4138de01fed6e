"""How fast this machine's cores are, so gate timings from different machines can be compared: prints a
table and writes bench/results/machine_speed-<UTC>.json.

    python3 bench/machine_speed.py

The gate is CPU-bound (its steps keep both cores 92-96% busy), so its wall time scales with the
cores' speed: on 2026-11-28 a new 2-core machine took 1.66 times the test-seconds for the same tests as the one before
(docs/development.md, "The gate"). Two probes, each the median CPU time of three tries:
- Python: 5 million additions in a loop (the test suites, the embedded AWS, pip);
- C++: ``g++ -O2 -c`` of a small translation unit that instantiates standard containers (the builds).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNIT = """#include <map>
#include <string>
#include <vector>
#include <algorithm>
template <int N> struct Box { std::map<std::string, std::vector<double>> m; double f(); };
template <int N> double Box<N>::f() {
  double s = 0; for (auto& [k, v] : m) { std::sort(v.begin(), v.end()); s += v.empty() ? 0 : v[0] + k.size(); }
  return s + Box<N - 1>().f();
}
template <> double Box<0>::f() { return 0; }
double run() { return Box<60>().f(); }
"""


def python_seconds() -> float:
    start = time.process_time()
    total = 0
    for i in range(5_000_000):
        total += i
    return time.process_time() - start


def cxx_seconds(compiler: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "probe.cpp").write_text(UNIT)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([compiler, "-std=c++17", "-O2", "-c", "probe.cpp"], cwd=tmp, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    compiler = shutil.which("g++")
    figures = {
        "cores": len(os.sched_getaffinity(0)),
        "python_cpu_s": round(statistics.median(python_seconds() for _ in range(3)), 3),
        "cxx_cpu_s": round(statistics.median(cxx_seconds(compiler) for _ in range(3)), 3) if compiler else None,
    }
    print("| cores | Python, 5 M additions (CPU-s) | g++ -O2 probe (CPU-s) |\n|---:|---:|---:|")
    print(f"| {figures['cores']} | {figures['python_cpu_s']} | {figures['cxx_cpu_s']} |")
    args.results.mkdir(parents=True, exist_ok=True)
    out = args.results / f"machine_speed-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps({"python": sys.version.split()[0], **figures}, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
