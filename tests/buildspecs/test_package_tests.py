"""wfbuild.stages.package_tests: the line a user needs from a failed test run, and the argv it runs."""

from __future__ import annotations

from pathlib import Path

from wfbuild.stages.package_tests import PackageTests, cause

PYTEST = """============================= test session starts ==============================
collected 3 items

test/test_scatter.py .F.                                                 [100%]

=================================== FAILURES ===================================
E       AssertionError: assert tensor([6.]) == tensor([3.])
=========================== short test summary info ============================
FAILED test/test_scatter.py::test_scatter_sum - AssertionError: assert tensor([6.]) == tensor([3.])
========================= 1 failed, 2 passed in 0.31s ==========================
"""
SCRIPT = """Traceback (most recent call last):
  File "/src/tests/check.py", line 3, in <module>
    assert got == 3, got
AssertionError: 6
"""


def test_the_cause_is_pytests_failed_line_else_the_last_error() -> None:
    assert cause(PYTEST, 1) == (
        "FAILED test/test_scatter.py::test_scatter_sum - AssertionError: assert tensor([6.]) == tensor([3.])"
    )
    assert cause(SCRIPT, 1) == "AssertionError: 6"
    assert cause("", 139) == "exit status 139"


def test_placeholders_become_the_source_folders_and_nothing_else() -> None:
    tests = PackageTests(
        ("-m", "pytest", "{project}/test", "-k", "not {slow}"), (), Path("/w/src/p"), Path("/w/src/p/ext")
    )
    assert tests.argv(Path("/v/bin/python")) == ["/v/bin/python", "-m", "pytest", "/w/src/p/test", "-k", "not {slow}"]
    assert PackageTests(("{package}/t.py",), (), Path("/a"), Path("/a/b")).argv(Path("py"))[1] == "/a/b/t.py"
