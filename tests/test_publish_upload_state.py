"""Issue 31: the Upload state's work (wheelfoundry.aws.uploads) against a real index server: the token from
Secrets Manager, the signature checked by KMS with the stack's key, the CodeArtifact token path, and the
report naming the upload when it fails.

moto 5.2.1 has no CodeArtifact: its path runs with an injected client that records the calls and answers
as CodeArtifact does (a token, the repository's PyPI endpoint, here the local index); the IAM that
allows exactly those calls is checked in tests/test_publish_iam.py.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.indexserver import envelope_for, pypiserver, tiny_wheel
from wheelfoundry.aws.report import report
from wheelfoundry.aws.uploads import upload_run
from wheelfoundry.errors import JobsFailed, PublishFailed
from wheelfoundry.publishing import provenance
from wheelfoundry.request.publish_targets import parse_to

CODE = "def add(a, b):\n    return a + b\n"
USERS = {"__token__": "pypi-from-secrets-manager", "aws": "codeartifact-token"}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with pypiserver(tmp_path_factory.mktemp("index"), USERS) as url:
        yield url


class FakeCodeArtifact:
    """CodeArtifact's two calls as the API answers them (moto 5.2.1 has no CodeArtifact)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint, self.calls = endpoint, []  # type: ignore[var-annotated]

    def get_authorization_token(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("GetAuthorizationToken", kwargs))
        return {"authorizationToken": USERS["aws"], "expiration": "2026-01-01T00:00:00Z"}

    def get_repository_endpoint(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("GetRepositoryEndpoint", kwargs))
        return {"repositoryEndpoint": self.endpoint}


def stage(tmp_path: Path, project: str, key_id: str, signer: Any) -> tuple[dict[str, Any], dict[str, Any], Path]:
    """A run that published one wheel into channel demo, signed as Attest signs."""
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="wf-wheels")
    wheel = tiny_wheel(tmp_path, project, "1.0", CODE)
    key = f"wheels/demo/{project}/{wheel.name}"
    s3.put_object(Bucket="wf-wheels", Key=key, Body=wheel.read_bytes())
    s3.put_object(Bucket="wf-wheels", Key=key + provenance.SUFFIX, Body=envelope_for(wheel, signer, key_id))
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    manifest = {"wheels": [{"name": wheel.name, "sha256": digest}]}
    s3.put_object(Bucket="wf-wheels", Key="runs/r1/jobs/j/manifest.json", Body=json.dumps(manifest))
    result = {"collect": {"published": [wheel.name]}}
    s3.put_object(Bucket="wf-wheels", Key="runs/r1/jobs/j/result.json", Body=json.dumps(result))
    run = {"id": "r1", "bucket": "wf-wheels", "channel": "demo"}
    return run, {"run": run, "jobs": [{"id": "j", "prefix": "runs/r1/jobs/j/"}]}, wheel


def kms_key() -> tuple[Any, str]:
    kms = boto3.client("kms", region_name="us-east-1")
    key_id = kms.create_key(KeySpec="ECC_NIST_P256", KeyUsage="SIGN_VERIFY")["KeyMetadata"]["Arn"]
    return kms, key_id


def clients(codeartifact: Any = None) -> dict[str, Any]:
    made = {name: boto3.client(name, region_name="us-east-1") for name in ("s3", "kms", "secretsmanager")}
    return made | {"codeartifact": codeartifact}


def test_token_from_secrets_manager_kms_verified_wheel_uploaded_then_skipped(index: str, tmp_path: Path) -> None:
    with mock_aws():
        kms, key_id = kms_key()
        run, event, wheel = stage(tmp_path, "wf-pub-lambda", key_id, provenance.kms_signer(kms, key_id))
        run["publish"] = parse_to(f"{index}/").to_dict()
        secret = boto3.client("secretsmanager", region_name="us-east-1").create_secret(
            Name="pypi-token", SecretString=USERS["__token__"]
        )["ARN"]
        # No secret deployed: PyPI refuses anonymous uploads, so the step says which parameter gives one;
        # an index of one's own without auth takes it, and this one (uploads need a user) refuses it.
        run["publish"] = parse_to("testpypi").to_dict()
        with pytest.raises(PublishFailed, match="no token for testpypi: deploy the stack with PublishTokenSecretArn"):
            upload_run(event, clients(), "", key_id, tmp_path / "work")
        run["publish"] = parse_to(f"{index}/").to_dict()
        with pytest.raises(PublishFailed, match=r"twine upload to http://127\.0\.0\.1:\d+/ failed"):
            upload_run(event, clients(), "", key_id, tmp_path / "work")
        result = upload_run(event, clients(), secret, key_id, tmp_path / "work")
        assert result["uploaded"] == [wheel.name] and result["status"] == "succeeded", result
        assert not (tmp_path / "work").exists()  # /tmp is left empty for the next invocation
        stored = json.loads(boto3.client("s3").get_object(Bucket="wf-wheels", Key="runs/r1/upload.json")["Body"].read())
        assert stored == result
        again = upload_run(event, clients(), secret, key_id, tmp_path / "work")
        assert again["uploaded"] == [] and again["skipped"][0]["wheel"] == wheel.name


def test_a_wheel_signed_by_another_key_is_refused_by_kms_verify(index: str, tmp_path: Path) -> None:
    with mock_aws():
        kms, key_id = kms_key()
        _, other = kms_key()
        run, event, wheel = stage(tmp_path, "wf-pub-forged-kms", key_id, provenance.kms_signer(kms, other))
        run["publish"] = parse_to(f"{index}/").to_dict()
        secret = boto3.client("secretsmanager", region_name="us-east-1").create_secret(
            Name="t", SecretString=json.dumps({"username": "__token__", "password": USERS["__token__"]})
        )["ARN"]
        result = upload_run(event, clients(), secret, key_id, tmp_path / "work")
    assert result["status"] == "partial" and result["uploaded"] == []
    assert result["refused"] == [
        {
            "wheel": wheel.name,
            "reason": "no valid signed provenance: signature does not verify with the stack's provenance key",
        }
    ]
    with pytest.raises(JobsFailed, match=r"upload: Refused: wf_pub_forged_kms-1\.0-py3-none-any\.whl: no valid signed"):
        report({"run": {**run, "id": "r1"}, "upload": result}, _Recorder())


def test_codeartifact_token_and_endpoint_come_from_its_api(index: str, tmp_path: Path) -> None:
    fake = FakeCodeArtifact(f"{index}/")
    with mock_aws():
        kms, key_id = kms_key()
        run, event, wheel = stage(tmp_path, "wf-pub-codeartifact", key_id, provenance.kms_signer(kms, key_id))
        run["publish"] = parse_to("codeartifact:my-domain/my-repo@111122223333").to_dict()
        result = upload_run(event, clients(fake), "", key_id, tmp_path / "work")
    assert result["uploaded"] == [wheel.name] and result["target"] == "codeartifact:my-domain/my-repo@111122223333"
    assert fake.calls == [
        ("GetAuthorizationToken", {"domain": "my-domain", "durationSeconds": 900, "domainOwner": "111122223333"}),
        (
            "GetRepositoryEndpoint",
            {"domain": "my-domain", "repository": "my-repo", "format": "pypi", "domainOwner": "111122223333"},
        ),
    ]


class _Recorder:
    def __init__(self) -> None:
        self.puts: list[dict[str, Any]] = []

    def put_object(self, **kwargs: Any) -> None:
        self.puts.append(kwargs)


def test_report_names_a_failed_upload_and_keeps_the_outcome() -> None:
    s3 = _Recorder()
    run = {"id": "r1", "bucket": "b", "channel": "demo"}
    failed = {
        "Error": "PublishFailed",
        "Cause": json.dumps({"errorMessage": "twine upload to https://upload.pypi.org/legacy/ failed (exit 1): 403"}),
    }
    with pytest.raises(JobsFailed, match=r"upload: PublishFailed: the upload to options.publish failed: twine upload"):
        report({"run": run, "upload": failed}, s3)
    body = json.loads(s3.puts[0]["Body"])
    assert body["upload"]["Error"] == "PublishFailed" and body["status"] == "failed"
    done = report(
        {
            "run": run,
            "upload": {"status": "succeeded", "target": "pypi", "uploaded": ["x.whl"], "skipped": [], "refused": []},
        },
        s3,
    )
    assert done["status"] == "succeeded" and json.loads(s3.puts[1]["Body"])["upload"]["uploaded"] == ["x.whl"]
