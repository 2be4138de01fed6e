"""pytest fixtures for the embedded AWS.

Use from a conftest.py:

    from wheelfoundry_local.testing import aws, embedded_aws, wf_parameters, wf_stack, wf_template  # noqa: F401

- `embedded_aws` (session): one EmbeddedAws for the whole run. Shared process-wide and reference
  counted, so conftest files at several levels importing these fixtures still get one server.
- `aws` (function): the same object, reset to an empty account before the test.
- `wf_stack` (function): `aws.deploy(wf_template, wf_parameters)`; override `wf_template`
  (default: <rootdir>/template.yaml) and `wf_parameters` (default: {}) to change what is deployed.
- `assert_no_instances(aws)`: nothing pending or running (call it at the end of a test).
- `assert_no_builds(aws)`: no CodeBuild build IN_PROGRESS (call it at the end of a test).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .deploy import DeployedStack
from .session import EmbeddedAws

_lock = threading.Lock()
_shared: EmbeddedAws | None = None
_users = 0


def acquire(state_dir: Path) -> EmbeddedAws:
    """The process-wide test instance, started on first use."""
    global _shared, _users
    with _lock:
        if _shared is None:
            _shared = EmbeddedAws(state_dir=state_dir)
            _shared.start()
        _users += 1
        return _shared


def release() -> None:
    global _shared, _users
    with _lock:
        _users -= 1
        if _users == 0 and _shared is not None:
            _shared.stop()
            _shared = None


def assert_no_instances(aws: EmbeddedAws, states: tuple[str, ...] = ("pending", "running")) -> None:
    left = aws.instances(states=states)
    assert not left, "instances left " + ", ".join(
        f"{i['InstanceId']} ({i['State']['Name']}, tags {i['Tags']})" for i in left
    )


def assert_no_builds(aws: EmbeddedAws, grace: float = 15.0) -> None:
    """A build that called back ends on its own a moment later (its post_build); one still running
    after `grace` seconds was left behind."""
    deadline = time.monotonic() + grace
    while aws.builds_in_progress() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = aws.builds_in_progress()
    assert not left, "builds in progress " + ", ".join(f"{b['id']} ({b['currentPhase']})" for b in left)


@pytest.fixture(scope="session")
def embedded_aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedAws]:
    instance = acquire(tmp_path_factory.mktemp("wf-local"))
    try:
        yield instance
    finally:
        release()


@pytest.fixture
def aws(embedded_aws: EmbeddedAws) -> EmbeddedAws:
    embedded_aws.reset()
    return embedded_aws


@pytest.fixture
def wf_template(request: pytest.FixtureRequest) -> Path:
    return Path(str(request.config.rootpath)) / "template.yaml"


@pytest.fixture
def wf_parameters() -> dict[str, Any]:
    return {}


@pytest.fixture
def wf_stack(aws: EmbeddedAws, wf_template: Path, wf_parameters: dict[str, Any]) -> DeployedStack:
    return aws.deploy(wf_template, wf_parameters)
