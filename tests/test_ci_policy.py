"""The gate cannot pass by not testing: under CI=true a skipped test fails (tests/conftest.py's hook)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = """import pytest

def test_skipped_inside():
    pytest.skip("no engine here")

@pytest.mark.skipif(True, reason="tool missing")
def test_skipped_by_mark():
    pass

def test_runs():
    pass
"""


def _run(tmp_path: Path, ci: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "no:xdist"]
    argv += ["-p", "tests.conftest", "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")]
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_under_ci_a_skip_fails_naming_the_test_and_its_reason(tmp_path: Path) -> None:
    proc = _run(tmp_path, "true")
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "test_probe.py::test_skipped_inside: skipped under CI=true (Skipped: no engine here)" in proc.stdout
    assert "test_probe.py::test_skipped_by_mark: skipped under CI=true (Skipped: tool missing)" in proc.stdout
    assert "PASSED test_probe.py::test_runs" in proc.stdout


def test_off_ci_a_skip_is_a_skip(tmp_path: Path) -> None:
    proc = _run(tmp_path, "")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "1 passed, 2 skipped" in proc.stdout
