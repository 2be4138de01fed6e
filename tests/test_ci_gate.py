""".ci/run's order and verdict, with a stand-in `make` on PATH: `make lint` runs beside `make test`, its output
is printed after, and either failing fails the gate before the heavy tests and the corpus."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _gate(tmp_path: Path, failing: str = "") -> tuple[subprocess.CompletedProcess[str], list[str]]:
    ci = tmp_path / "repo" / ".ci"
    ci.mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", ci / "run")
    calls = tmp_path / "calls"
    (ci / "heavy").write_text(f'echo "heavy" >> "{calls}"\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    make = bin_dir / "make"
    make.write_text(
        f'#!/bin/sh\necho "make $*" >> "{calls}"\n'
        f'if [ "$1" = "{failing}" ]; then echo "make $1: it broke"; exit 3; fi\necho "make $1: fine"\n'
    )
    make.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "WF_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(["bash", str(ci / "run")], env=env, capture_output=True, text=True, timeout=60)
    return proc, calls.read_text().splitlines() if calls.exists() else []


def test_a_green_gate_runs_every_step_in_order(tmp_path: Path) -> None:
    proc, calls = _gate(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls[0] == "make venv sam checkov" and set(calls[1:3]) == {"make lint", "make test"}
    assert calls[3:] == ["heavy", "make corpus"]
    assert "make lint (beside make test) ended with exit status 0" in proc.stdout and "make lint: fine" in proc.stdout


def test_a_lint_failure_fails_the_gate_after_make_test_and_shows_lints_output(tmp_path: Path) -> None:
    proc, calls = _gate(tmp_path, failing="lint")
    assert proc.returncode == 1, proc.stdout
    assert "make test" in calls and "heavy" not in calls and "make corpus" not in calls
    assert "make lint: it broke" in proc.stdout and "make lint exit status 3" in proc.stderr


def test_a_test_failure_fails_the_gate_and_still_shows_lints_output(tmp_path: Path) -> None:
    proc, calls = _gate(tmp_path, failing="test")
    assert proc.returncode == 1, proc.stdout
    assert "heavy" not in calls and "make corpus" not in calls
    assert "make lint: fine" in proc.stdout and "make test exit status 3, make lint exit status 0" in proc.stderr
