"""Record each test's duration from a JUnit report, for tests/conftest.py's longest-first order.

    .venv/bin/python tools/test_durations.py REPORT.xml [REPORT.xml ...] [--table N]

Reads pytest's ``--junitxml`` reports (a whole `.ci/run`'s, say), merges their times into
tests/durations.json (node id -> seconds, newest measurement wins) and prints the N longest.
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = ROOT / "tests" / "durations.json"


def node_id(case: ET.Element) -> str:
    """pytest's node id from a <testcase>: classname "tests.buildspecs.test_x.TestY" + name."""
    parts = case.get("classname", "").split(".")
    path = [p for p in parts if not p[:1].isupper()]
    klass = [p for p in parts if p[:1].isupper()]
    return "::".join(["/".join(path) + ".py", *klass, case.get("name", "")])


def read(report: Path) -> dict[str, float]:
    tree = ET.parse(report)  # noqa: S314 - our own pytest's report
    return {node_id(case): round(float(case.get("time", 0.0)), 1) for case in tree.iter("testcase")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--table", type=int, default=25)
    args = parser.parse_args()
    known = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    for report in args.reports:
        known.update(read(report))
    DURATIONS.write_text(json.dumps(dict(sorted(known.items())), indent=1) + "\n")
    longest = sorted(known.items(), key=lambda kv: -kv[1])[: args.table]
    for name, seconds in longest:
        print(f"{seconds:8.1f} s  {name}")
    print(f"{len(known)} tests, {sum(known.values()) / 60:.1f} test-minutes; wrote {DURATIONS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
