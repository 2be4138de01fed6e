"""The longest-first order of the test session: durations read from JUnit reports, tests sorted by them."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests import conftest
from tools import test_durations


def test_junit_cases_become_pytest_node_ids(tmp_path: Path) -> None:
    report = tmp_path / "report.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.workflow.test_workflow" name="test_one" time="12.34"/>'
        '<testcase classname="tests.workflow.test_workflow.TestShortHeartbeat" name="test_two[a-b]" time="3"/>'
        "</testsuite></testsuites>"
    )
    assert test_durations.read(report) == {
        "tests/workflow/test_workflow.py::test_one": 12.3,
        "tests/workflow/test_workflow.py::TestShortHeartbeat::test_two[a-b]": 3.0,
    }


def test_the_modules_with_the_longest_tests_run_first_each_kept_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    durations = tmp_path / "durations.json"
    measured = {"m.py::a": 5.0, "m.py::b": 300.0, "n.py::d": 1.0, "p.py::e": 2.0, "p.py::f": 40.0}
    durations.write_text(json.dumps(measured))
    monkeypatch.setattr(conftest, "DURATIONS", durations)
    names = ("m.py::a", "n.py::d", "m.py::b", "o.py::c", "p.py::e", "p.py::f")
    items: list[Any] = [SimpleNamespace(nodeid=n, get_closest_marker=lambda name: None) for n in names]
    conftest.pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]
    # m holds the longest test (300 s), p the next (40 s), o is unmeasured (a middling 30 s), n 1 s; inside
    # a module the file's order holds, so its module-scoped fixtures are built once
    assert [i.nodeid for i in items] == ["m.py::a", "m.py::b", "p.py::e", "p.py::f", "o.py::c", "n.py::d"]
