"""Handlers' AWS clients: one per service, region, endpoint and credentials, reused by warm invocations."""

from __future__ import annotations

import boto3
import pytest

from wheelfoundry.handlers.runtime import Runtime


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFIRST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


def test_a_second_invocation_reuses_the_first_ones_client() -> None:
    first = Runtime({"AWS_REGION": "us-east-1"}).client("s3")
    assert Runtime({"AWS_REGION": "us-east-1"}).client("s3") is first
    assert Runtime({"AWS_REGION": "eu-west-1"}).client("s3") is not first
    assert Runtime({"AWS_REGION": "us-east-1"}).client("sqs") is not first


def test_a_new_endpoint_or_default_session_gets_a_new_client(monkeypatch: pytest.MonkeyPatch) -> None:
    first = Runtime({"AWS_REGION": "us-east-1"}).client("s3")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    second = Runtime({"AWS_REGION": "us-east-1"}).client("s3")
    assert second is not first and second.meta.endpoint_url == "http://127.0.0.1:9"
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIASECOND")
    third = Runtime({"AWS_REGION": "us-east-1"}).client("s3")
    assert third is not second
    assert third._request_signer._credentials.access_key == "AKIASECOND"
