"""Checks that stop a job before it builds something mislabelled."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from wfbuild.envs import cuda_problem
from wfbuild.hostinfo import platform_problem


@pytest.mark.parametrize(
    ("job", "machine", "ok"),
    [
        ("x86_64", "x86_64", True),
        ("aarch64", "arm64", True),
        ("aarch64", "aarch64", True),
        ("aarch64", "x86_64", False),
        ("x86_64", "aarch64", False),
    ],
)
def test_a_job_builds_only_on_its_own_architecture(job: str, machine: str, ok: bool) -> None:
    problem = platform_problem(job, machine)
    assert (problem is None) == ok
    if problem:
        assert job in problem and "never cross-compiled" in problem


def test_a_cuda_cell_refuses_a_torch_without_that_cuda(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    wrapper = tmp_path / "bin" / "python"  # this venv's Python, with its torch 2.13.0+cpu
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    problem = cuda_problem(tmp_path, "13.0")
    assert problem is not None and "built for CUDA none" in problem and "needs CUDA 13.0" in problem


def test_a_cuda_cell_refuses_an_environment_without_torch(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    wrapper = tmp_path / "bin" / "python"  # this venv's Python without its site-packages: no torch
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    wrapper.chmod(0o755)
    problem = cuda_problem(tmp_path, "13.0")
    assert problem is not None and problem.startswith(f"no torch/version.py in {tmp_path}"), problem
