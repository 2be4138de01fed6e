"""docs/performance.md, generated from bench/results/*.json: every measurement the project quotes, as its
bench wrote it. No figure on that page is typed by hand; tests/test_perf_docs.py fails when the page no
longer matches the results.

    python3 tools/perf_docs.py          # write docs/performance.md
    python3 tools/perf_docs.py --check  # exit 1 if it is stale

Each result file becomes a section under its bench's heading (newest first): its scalar fields as a list,
each list of records (``rows``, ``packages``, ...) and each table of named records (``imports``,
``median``, ...) as a table. Long hashes are shortened; nothing else is rounded or left out.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "performance.md"
STAMP = re.compile(r"^(?P<bench>[a-z_]+)-(?P<ts>\d{8}T\d{6}Z)\.json$")
HEX = re.compile(r"^[0-9a-f]{40,64}$")

# What each bench measures and how to run it again: the only prose on the page.
BENCHES: dict[str, tuple[str, str]] = {
    "plan_time": ("`wheelfoundry plan`, as a user runs it", "bench/plan_time.py"),
    "corpus": ("real PyTorch extensions from PyPI through the embedded farm (`make corpus`)", "tools/corpus.py"),
    "nvcc_threads": ("a CUDA cell's build with nvcc `--threads`, extensions side by side", "bench/nvcc_threads.py"),
    "heavy_cell": ("a heavy CUDA package from PyPI as one cell: time, memory per unit, wheel", "bench/heavy_cell.py"),
    "gpu_check_mamba": (
        "the heavy_cell mamba-ssm wheel on a GPU against plain torch (a correctness record)",
        "bench/gpu_check_mamba.py --wheel PATH --results bench/results",
    ),
    "parallel_compile": ("a build without ninja, serial against parallel compiles", "bench/parallel_compile.py"),
    "wall_plan": ("planned wall time, build-hours and dollars of an extension matrix", "bench/wall_plan.py"),
    "compiler_cache": ("cold, warm and one-file-changed builds through sccache on S3", "bench/compiler_cache.py"),
    "packing": ("cells packed on one instance against one cell at a time", "bench/packing.py"),
    "container_mode": ("one job in Docker (the EC2 path) against host mode", "bench/container_mode.py"),
    "concurrency": ("N one-job runs started at once against an EC2 vCPU quota", "bench/concurrency.py"),
    "lambda_bundle": ("the functions' bundle size and each handler's cold import", "bench/lambda_bundle.py"),
    "gate_heavy": (
        "the heavy tests' seconds in `.ci/run`, before and after making them cheaper",
        "bench/gate_heavy.py --before OLD_DURATIONS.json --after JUNIT.xml",
    ),
    "machine_speed": (
        "this machine's cores: two CPU probes, to compare gate timings across machines",
        "bench/machine_speed.py",
    ),
    "release_day_plan": (
        "release day's plan: a torch newer than the catalog for two real subscriptions, every variant and Python",
        "bench/release_day_plan.py",
    ),
    "abi_plans": (
        "one wheel for every torch: torch 2.10-2.15 built per torch minor, or once on the stable ABI",
        "bench/abi_plans.py",
    ),
    "gpu_check_stable": (
        "a stable-ABI wheel's CUDA kernel (and driver-API call, -lcuda) on a GPU under a torch minor other than the "
        "one it was built with, inside its declared range, by its check and by the farm's GPU step",
        "bench/gpu_check_stable.py publish (the farm's own run; or build); then check WHEEL and "
        "python -m wfbuild.gpu.gpu_test on a host with a GPU; then bench/gpu_check_stable.py record",
    ),
    "stable_retests": (
        "one stable wheel, three torch releases: built once (2.13), then served on 2.14.1 and 2.15.0 by retests "
        "with no build, on the embedded stack",
        "bench/stable_retests.py",
    ),
    "release_day": (
        "release day, run: one watcher tick on the embedded stack against today's PyPI, to the published wheel",
        "bench/release_day.py",
    ),
    "unit_costs": (
        "one compile of each C++ and CUDA unit the tests build, and of each torch header they choose between",
        "bench/unit_costs.py",
    ),
}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(round(value, 4))
    if isinstance(value, str):
        text = f"{value[:16]}…" if HEX.match(value) else value
        return text.replace("|", "\\|").replace("\n", " ")
    if isinstance(value, Sequence) and all(not isinstance(v, Mapping | list) for v in value):
        return ", ".join(_cell(v) for v in value)
    if isinstance(value, Mapping) and all(not isinstance(v, Mapping) for v in value.values()):
        return "; ".join(f"{k} {_cell(v)}" for k, v in value.items())
    return "`" + json.dumps(value, separators=(",", ":"), sort_keys=True).replace("|", "\\|") + "`"


def _flatten(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record's fields, one level of nested records as ``outer.inner``; lists of records as a count."""
    flat: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, Mapping) and all(not isinstance(v, Mapping | list) for v in value.values()):
            flat |= {f"{key}.{k}": v for k, v in value.items()}
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            flat[f"{key} (count)"] = len(value)
        else:
            flat[key] = value
    return flat


def _table(records: Sequence[Mapping[str, Any]], first: str | None = None) -> list[str]:
    flat = [_flatten(r) for r in records]
    columns = list(dict.fromkeys(k for r in flat for k in r))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in columns) + " |" for r in flat]
    return lines


def _is_records(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


def _is_named_records(value: Any) -> bool:
    return isinstance(value, Mapping) and bool(value) and all(isinstance(v, Mapping) for v in value.values())


def render_result(name: str, data: Mapping[str, Any]) -> list[str]:
    match = STAMP.match(name)
    assert match, name
    ts = match["ts"]
    when = f"{ts[:4]}-{ts[4:6]}-{ts[6:8]} {ts[9:11]}:{ts[11:13]} UTC"
    lines = [f"### {when}", "", f"`bench/results/{name}`", ""]
    scalars = {k: v for k, v in data.items() if not _is_records(v) and not _is_named_records(v)}
    lines += [f"- {key}: {_cell(value)}" for key, value in scalars.items()]
    for key, value in data.items():
        if _is_records(value):
            lines += ["", f"**{key}**", "", *_table(value)]
        elif _is_named_records(value):
            named = [{key: label, **record} for label, record in value.items()]
            lines += ["", f"**{key}**", "", *_table(named)]
    return [*lines, ""]


def render(results: Path = RESULTS) -> str:
    files: dict[str, list[Path]] = {}
    for path in sorted(results.glob("*.json")):
        match = STAMP.match(path.name)
        if match is None:
            raise ValueError(f"{path.name}: expected <bench>-<YYYYMMDDTHHMMSSZ>.json")
        files.setdefault(match["bench"], []).append(path)
    lines = [
        "# Performance",
        "",
        "<!-- Generated by tools/perf_docs.py from bench/results/*.json; do not edit. -->",
        "",
        "Every measurement the documentation relies on, as its bench recorded it in `bench/results/`, newest",
        "first. Times are seconds unless a column says otherwise; the machine is the one each file names (most",
        "are a 2-core development machine shared with other work, so single figures vary by several percent).",
        "Run a bench again and then `python3 tools/perf_docs.py` to add its file here.",
        "",
    ]
    order = [b for b in BENCHES if b in files] + sorted(b for b in files if b not in BENCHES)
    lines += [f"- [{b}](#{b}): {BENCHES.get(b, ('', ''))[0]}" for b in order]
    for bench in order:
        what, script = BENCHES.get(bench, ("", ""))
        lines += ["", f"## {bench}", ""]
        if what:
            lines += [f"{what[0].upper()}{what[1:]}. Run again: `.venv/bin/python {script}`.", ""]
        for path in sorted(files[bench], reverse=True):
            lines += render_result(path.name, json.loads(path.read_text(encoding="utf-8")))
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/performance.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python3 tools/perf_docs.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
