"""Fixtures for the embedded AWS's own tests: one shared server, a fresh account per test."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_local.testing import aws, embedded_aws  # noqa: F401

FIXTURES = Path(__file__).parent / "fixtures"
TEMPLATE = FIXTURES / "sam" / "template.yaml"


@pytest.fixture
def stack(aws: EmbeddedAws) -> DeployedStack:  # noqa: F811
    return aws.deploy(TEMPLATE)


def launch(aws: EmbeddedAws, **tags: str) -> str:  # noqa: F811
    ec2 = aws.client("ec2")
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
    response = ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1, TagSpecifications=spec)
    return str(response["Instances"][0]["InstanceId"])


def wait_for(predicate: object, timeout: float = 10.0, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)


def online(aws: EmbeddedAws, instance_id: str) -> None:  # noqa: F811
    """Wait until the emulated agent registered the instance."""
    wait_for(lambda: aws.registration.is_online(aws.region, instance_id), timeout=5)


@pytest.fixture(autouse=True)
def _no_instance_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """The project's rule for every test that uses the emulator: nothing pending or running after it."""
    session = request.getfixturevalue("embedded_aws") if "aws" in request.fixturenames else None
    yield
    if session is not None:
        from wheelfoundry_local.testing import assert_no_builds, assert_no_instances

        assert_no_instances(session)
        assert_no_builds(session)
