"""The longest-first order of the test session: durations read from JUnit reports, tests sorted by them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests import conftest

ROOT = Path(__file__).resolve().parents[1]


def _tool() -> Any:
    spec = importlib.util.spec_from_file_location("test_durations_tool", ROOT / "tools" / "test_durations.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_junit_cases_become_pytest_node_ids(tmp_path: Path) -> None:
    report = tmp_path / "report.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.workflow.test_workflow" name="test_one" time="12.34"/>'
        '<testcase classname="tests.workflow.test_workflow.TestShortHeartbeat" name="test_two[a-b]" time="3"/>'
        "</testsuite></testsuites>"
    )
    assert _tool().read(report) == {
        "tests/workflow/test_workflow.py::test_one": 12.3,
        "tests/workflow/test_workflow.py::TestShortHeartbeat::test_two[a-b]": 3.0,
    }


def test_the_session_runs_the_longest_tests_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({"a": 5.0, "b": 300.0, "d": 1.0}))
    monkeypatch.setattr(conftest, "DURATIONS", durations)
    items: list[Any] = [SimpleNamespace(nodeid=n) for n in ("a", "b", "c", "d")]
    conftest.pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == ["b", "c", "a", "d"]  # c: not measured, a middling 30 s
