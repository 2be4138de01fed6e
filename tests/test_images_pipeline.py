"""Issue 11 item 2, the pipeline's side without the emulator: Validate's image contracts, the Images
function's StartBuild (token in S3 only), Report on failed images, and the template's runtime pieces.
tests/workflow/test_images.py runs the whole path once in the embedded AWS."""

from __future__ import annotations

import io
import json
import zipfile
from datetime import date
from typing import Any

import pytest

from tests.helpers import resources as all_resources
from wheelfoundry.aws.image_builds import start_image, token_key
from wheelfoundry.aws.report import report
from wheelfoundry.aws.runs import ValidateSettings, validate
from wheelfoundry.errors import JobsFailed


class FakeS3:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put_object(self, Bucket: str, Key: str, Body: Any, **_: Any) -> None:
        self.objects[Key] = Body.encode() if isinstance(Body, str) else bytes(Body)

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        return {"Body": io.BytesIO(self.objects[Key])}


class FakeCodeBuild:
    def __init__(self) -> None:
        self.started: list[dict[str, Any]] = []

    def start_build(self, **kwargs: Any) -> dict[str, Any]:
        self.started.append(kwargs)
        return {"build": {"id": f"{kwargs['projectName']}:b{len(self.started)}"}}


REQUEST = {"version": "2.5.1", "python": ["3.12"], "packages": ["torch"], "image": {"tz": "UTC", "tag": "{run}-x"}}


def test_validate_writes_one_contract_per_image_with_the_run_in_its_tag() -> None:
    s3 = FakeS3()
    s3.objects["bundles/current.json"] = b'{"key": "bundles/abc.zip"}'
    settings = ValidateSettings("bucket", "us-east-1", "builders", 24, 250.0, 900, 10, runtime_repository="acct/rt")
    out = validate({"request": REQUEST, "name": "run-7", "execution": "arn:x"}, s3, settings, date(2026, 1, 1))
    assert out["run"]["images"] is True and out["image_builds"] == []
    (summary,) = out["images"]
    contract = json.loads(s3.objects[summary["key"]])
    assert summary["key"] == "runs/run-7/images/image-torch2.5.1-cpu-py3.12-x86_64/image.json"
    assert contract["tag"] == "run-7-x" and contract["run"]["runtime_repository"] == "acct/rt"
    assert contract["wheels"] == [{"package": "torch", "version": None, "channel": None}]
    plain = validate({"request": {"version": "2.5.1"}, "name": "r", "execution": "a"}, s3, settings, date(2026, 1, 1))
    assert plain["run"]["images"] is False and plain["images"] == []


def test_start_image_keeps_the_token_in_s3_and_out_of_the_build() -> None:
    s3, codebuild = FakeS3(), FakeCodeBuild()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("codebuild/image.yml", "version: 0.2\n")
    s3.objects["bundles/abc.zip"] = buffer.getvalue()
    run = {"id": "run-7", "bucket": "bucket", "bundle_key": "bundles/abc.zip"}
    image = {"id": "image-a", "key": "runs/run-7/images/image-a/image.json", "compute_type": "BUILD_GENERAL1_MEDIUM"}
    event = {"token": "SECRET-TOKEN", "run": run, "image": image, "execution": "arn:exec"}
    result = start_image(event, s3, codebuild, "images-project")
    assert result == {"id": "image-a", "build_id": "images-project:b1", "project": "images-project"}
    assert s3.objects[token_key("run-7", "image-a")] == b"SECRET-TOKEN"
    (call,) = codebuild.started
    assert "SECRET-TOKEN" not in json.dumps(call)
    env = {v["name"]: v["value"] for v in call["environmentVariablesOverride"]}
    assert env["WF_TOKEN_KEY"] == "runs/run-7/jobs/image-a/token" and env["WF_IMAGE_KEY"] == image["key"]
    assert call["buildspecOverride"] == "version: 0.2\n" and call["computeTypeOverride"] == "BUILD_GENERAL1_MEDIUM"


def test_report_fails_the_run_for_a_failed_image_and_keeps_pushed_ones() -> None:
    s3 = FakeS3()
    run = {"id": "r", "bucket": "b", "channel": "ci"}
    pushed = {"id": "image-a", "status": "pushed", "uri": "acct/rt:r-a"}
    failed = {"id": "image-b", "status": "failed", "error": "ImageFailed", "cause": "IMAGE TEST FAILED: time zone"}
    base = {"run": run, "jobs": [], "results": [], "publish": {}, "merge": {}}
    assert report({**base, "images": [pushed]}, s3)["status"] == "succeeded"
    with pytest.raises(JobsFailed, match="image-b"):
        report({**base, "images": [pushed, failed]}, s3)
    body = json.loads(s3.objects["runs/r/report.json"])
    assert body["images"] == [pushed, failed] and [f["job_id"] for f in body["failed"]] == ["image-b"]
    with pytest.raises(JobsFailed, match="images"):
        report({**base, "images": {"Error": "States.Runtime", "Cause": "map failed"}}, s3)


def test_template_runtime_repository_project_and_role_are_scoped() -> None:
    resources = all_resources()
    assert resources["RuntimeRepository"]["Properties"]["ImageTagMutability"] == "IMMUTABLE"
    project = resources["RuntimeImageProject"]["Properties"]
    assert project["Environment"]["PrivilegedMode"] is True and project["Source"]["Type"] == "NO_SOURCE"
    statements = resources["RuntimeImageRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    by_sid = {s["Sid"]: s for s in statements if isinstance(s, dict) and "Sid" in s}
    assert by_sid["PushRuntimeImages"]["Resource"] == {"Fn::GetAtt": ["RuntimeRepository", "Arn"]}
    assert "BuilderRepository" not in json.dumps(statements)  # runtime images never touch the builder images
    assert "runs/*/images/*/result.json" in json.dumps(by_sid["WriteResult"]) and "wheels/" not in json.dumps(
        by_sid["WriteResult"]
    )
    images = resources["ImagesFunction"]["Properties"]
    assert "RuntimeImageProject" in json.dumps(images["Policies"]) and "CodeBuildProjectX86" not in json.dumps(images)


def test_report_names_provenance_that_was_not_signed_and_keeps_what_was() -> None:
    s3 = FakeS3()
    run = {"id": "r", "bucket": "b", "channel": "ci"}
    base = {"run": run, "jobs": [], "results": [], "publish": {}, "merge": {}, "images": []}
    signed = {"status": "succeeded", "signed": ["a.whl"], "kept": [], "refused": []}
    assert report({**base, "attest": signed}, s3)["signed"] == 1
    assert json.loads(s3.objects["runs/r/report.json"])["provenance"]["signed"] == ["a.whl"]
    partial = {
        **signed,
        "status": "partial",
        "refused": [{"wheel": "b.whl", "reason": "hashes to 00, manifest says 11"}],
    }
    with pytest.raises(JobsFailed, match=r"b\.whl: hashes to 00"):
        report({**base, "attest": partial}, s3)
    crashed = {"Error": "Lambda.Unknown", "Cause": '{"errorMessage": "KMS AccessDenied"}'}
    with pytest.raises(JobsFailed, match="no provenance signed"):
        report({**base, "attest": crashed}, s3)
    body = json.loads(s3.objects["runs/r/report.json"])
    assert body["provenance"] == {"Error": "Lambda.Unknown"} and body["failed"][0]["job_id"] == "provenance"
