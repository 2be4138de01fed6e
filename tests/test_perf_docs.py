"""docs/performance.md is generated from bench/results/*.json (tools/perf_docs.py): no figure on it is typed by
hand, and the page fails this test as soon as it no longer matches the results."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tools import perf_docs

ROOT = Path(__file__).resolve().parents[1]


def test_the_performance_page_matches_the_results() -> None:
    assert (ROOT / "docs" / "performance.md").read_text(encoding="utf-8") == perf_docs.render(), (
        "docs/performance.md is stale: run python3 tools/perf_docs.py"
    )


def test_every_result_and_every_figure_of_it_reaches_the_page(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(ROOT / "bench" / "results", results)
    before = perf_docs.render(results)
    corpus = sorted(results.glob("corpus-*.json"))[-1]
    data = json.loads(corpus.read_text())
    data["packages"][0]["compile_seconds"] = 12345.6
    corpus.write_text(json.dumps(data))
    (results / "plan_time-20990101T000000Z.json").write_text(
        json.dumps({"cpus": 2, "rows": [{"request": "x", "runs": 1, "best_ms": 77.7}]})
    )
    after = perf_docs.render(results)
    assert after != before
    assert "| 12345.6 |" in after and "### 2099-01-01 00:00 UTC" in after and "| 77.7 |" in after
    for path in sorted(results.glob("*.json")):
        assert f"`bench/results/{path.name}`" in after


def test_a_result_file_without_a_bench_and_time_in_its_name_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.json").write_text("{}")
    try:
        perf_docs.render(tmp_path)
    except ValueError as exc:
        assert "notes.json: expected <bench>-<YYYYMMDDTHHMMSSZ>.json" in str(exc)
    else:
        raise AssertionError("an unnamed result was rendered")
