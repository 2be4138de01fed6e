"""One build-environment cache for the whole test session.

A cold torch environment costs ~45 s (torch 2.13.0+cpu) and far more for a CUDA torch. The embedded
AWS's agent and CodeBuild, the runner tests and the `wheelfoundry local run/up` subprocesses all read
``WF_CACHE_DIR``; pointing them at one folder builds each environment once per session, as one farm
machine reuses them between jobs (wfbuild.envs keys the cache by interpreter and packages).
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

_CREATED: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("WF_CACHE_DIR"):
        os.environ["WF_CACHE_DIR"] = tempfile.mkdtemp(prefix="wf-test-cache-")
        _CREATED.append(os.environ["WF_CACHE_DIR"])


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _CREATED:
        shutil.rmtree(folder, ignore_errors=True)
