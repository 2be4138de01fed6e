"""The Docker test bed (tools/docker_testbed.py) for the container-mode tests.

Without an engine these tests skip locally, printing why; in CI (``CI=true``) they fail with the
same reason, since `.ci/run` starts the engine before `make test` and a missing engine there is a
broken test bed, not a reason to pass.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.workflow.conftest import parameters, stack  # noqa: F401
from wheelfoundry_local.testing import aws, embedded_aws  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


def testbed() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docker_testbed", ROOT / "tools" / "docker_testbed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("docker_testbed", module)
    spec.loader.exec_module(module)
    return module


def unavailable(reason: str) -> None:
    message = f"Docker test bed unavailable: {reason}"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message + " (CI=true: .ci/run starts the engine; this is a failure, not a skip)")
    print(message, file=sys.stderr)
    pytest.skip(message)


@pytest.fixture(scope="session")
def docker_testbed() -> ModuleType:
    bed = testbed()
    problem = bed.engine_problem()
    if problem:
        unavailable(problem)
    return bed


@pytest.fixture(scope="session")
def builder_image(docker_testbed: ModuleType) -> str:
    """The test builder image: reused when its inputs are unchanged, else built (about 80 s cold)."""
    try:
        return str(docker_testbed.build_builder())
    except Exception as exc:  # a build that cannot finish here is the same verdict as no engine
        unavailable(f"the test images could not be built: {exc}")
        raise


@pytest.fixture
def container_mode(monkeypatch: pytest.MonkeyPatch, docker_testbed: ModuleType, builder_image: str) -> str:
    """The local agent runs the Build document with WF_CONTAINER=docker and the test builder image."""
    return build_in(monkeypatch, docker_testbed, builder_image)


def build_in(monkeypatch: pytest.MonkeyPatch, docker_testbed: ModuleType, image: str) -> str:
    """The local agent's builds run their stages in ``image`` on the test bed's engine."""
    monkeypatch.setenv("WF_LOCAL_CONTAINER", "docker")
    monkeypatch.setenv("WF_BUILDER_IMAGE", image)
    monkeypatch.setenv("DOCKER_HOST", docker_testbed.docker_host())
    return image


@pytest.fixture
def runtime_base(monkeypatch: pytest.MonkeyPatch, docker_testbed: ModuleType, container_mode: str) -> str:
    """The runtime image jobs build FROM the test bed's runtime base (standing in for python:3.12-slim)."""
    base = str(docker_testbed.build_runtime())
    monkeypatch.setenv("WF_RUNTIME_BASE_IMAGE", base)
    return base
