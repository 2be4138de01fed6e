"""The package's own tests (request "test"), run against an installed wheel: cibuildwheel's test-command.

A test job's smoke stage (wfbuild.stages.smoke) calls ``run`` after the wheel is installed from its published
file and imported. ``requires`` are installed into the same venv first (pip, held to the venv's torch
by the smoke's constraint file), then ``python COMMAND...`` runs as an argv (no shell) in an empty
folder, so ``import <package>`` finds the installed wheel and never the source tree. ``{project}`` in
an argument becomes the source's root, ``{package}`` the folder its setup.py is in. The environment is
the smoke's probe's (a CUDA cell with ``CUDA_VISIBLE_DEVICES=""``: the GPU step, options.gpu_test, is the
one with a GPU).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 3600
# The line of a test run's output that says what failed, most telling first (pytest's, unittest's).
FAILURE_MARKS = ("FAILED ", "ERROR ", "Error:", "Error ", "assert", "FAILED")


@dataclass(frozen=True)
class PackageTests:
    command: tuple[str, ...]
    requires: tuple[str, ...]
    project: Path
    package: Path

    def argv(self, python: Path) -> list[str]:
        subs = {"{project}": str(self.project), "{package}": str(self.package)}
        out = [str(python)]
        for arg in self.command:
            for key, value in subs.items():
                arg = arg.replace(key, value)
            out.append(arg)
        return out


def cause(output: str, returncode: int) -> str:
    """The one line a user needs: pytest's first FAILED/ERROR line, else the last error-looking line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for mark in FAILURE_MARKS:
        found = [ln for ln in lines if mark in ln]
        if found:
            return (found[0] if mark.startswith(("FAILED ", "ERROR ")) else found[-1])[:500]
    return (lines[-1][:500] if lines else "") or f"exit status {returncode}"


def install_requires(venv: Path, tests: PackageTests) -> subprocess.CompletedProcess[str] | None:
    if not tests.requires:
        return None
    argv = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--no-compile"]
    constraint = venv / "wf-constraints.txt"  # the smoke's: torch stays the cell's own
    if constraint.is_file():
        argv += ["--constraint", str(constraint)]
    return subprocess.run([*argv, *tests.requires], capture_output=True, text=True, check=False)


def run(venv: Path, tests: PackageTests, env: dict[str, str]) -> tuple[bool, str]:
    """(passed, detail): detail is the last summary line on success, the failing line otherwise."""
    installed = install_requires(venv, tests)
    if installed is not None:
        sys.stdout.write(installed.stdout + installed.stderr)
        if installed.returncode != 0:
            why = cause(installed.stderr + installed.stdout, installed.returncode)
            return False, f"installing {' '.join(tests.requires)}: {why}"
    scratch = venv / "wf-package-tests"
    scratch.mkdir(parents=True, exist_ok=True)
    argv = tests.argv(venv / "bin" / "python")
    print(f"package tests: {' '.join(argv)} (in {scratch})", flush=True)
    try:
        proc = subprocess.run(
            argv, cwd=scratch, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return False, f"the package's tests ran past {TIMEOUT_S} s"
    output = proc.stdout + proc.stderr
    for line in output.splitlines():
        print(f"  | {line}")
    if proc.returncode != 0:
        return False, cause(output, proc.returncode)
    # The summary (pytest's "12 passed in 3.1s") is stdout's last line; stderr carries warnings.
    lines = [ln.strip() for ln in (proc.stdout.splitlines() or proc.stderr.splitlines()) if ln.strip()]
    return True, (lines[-1][:300] if lines else "exit status 0")
