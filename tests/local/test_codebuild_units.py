"""wheelfoundry.aws.codebuild against in-memory fakes: what StartBuild is given (never the token),
idempotent starts, the state-change callback's guards, and which builds the reaper stops."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from wheelfoundry.aws.codebuild import BuildSettings, on_build_state, reap_builds, start, timeout_minutes

TOKEN = "AQCEAAAAKgAAAAMAAAAAAAAAAU-secret-token=="
PREFIX = "runs/r1/jobs/j1/"
SETTINGS = BuildSettings("bucket", {"x86_64": "proj-x86", "aarch64": "proj-arm"}, "ext-role")


def missing() -> ClientError:
    return ClientError({"Error": {"Code": "NoSuchKey", "Message": "missing"}}, "GetObject")


class S3:
    def __init__(self) -> None:
        bundle = io.BytesIO()
        with zipfile.ZipFile(bundle, "w") as archive:
            archive.writestr("codebuild/build.yml", "version: 0.2\n")
        self.objects: dict[str, bytes] = {"bundles/b.zip": bundle.getvalue()}
        self.objects[f"{PREFIX}job.json"] = json.dumps(
            {"kind": "extension", "compute_type": "BUILD_GENERAL1_SMALL"}
        ).encode()
        self.puts: list[dict[str, Any]] = []

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        if Key not in self.objects:
            raise missing()
        return {"Body": io.BytesIO(self.objects[Key])}

    def put_object(self, Bucket: str, Key: str, Body: bytes, **kwargs: Any) -> None:
        self.objects[Key] = Body
        self.puts.append({"Key": Key, **kwargs})


class CodeBuild:
    def __init__(self, builds: list[dict[str, Any]] | None = None) -> None:
        self.started: list[dict[str, Any]] = []
        self.stopped: list[str] = []
        self.builds = builds or []

    def start_build(self, **params: Any) -> dict[str, Any]:
        self.started.append(params)
        build = {"id": f"{params['projectName']}:{len(self.started)}", "buildStatus": "IN_PROGRESS"}
        self.builds.append(build)
        return {"build": build}

    def batch_get_builds(self, ids: list[str]) -> dict[str, Any]:
        return {"builds": [b for b in self.builds if b["id"] in ids]}

    def stop_build(self, id: str) -> None:
        self.stopped.append(id)

    def list_builds_for_project(self, projectName: str, sortOrder: str) -> dict[str, Any]:
        return {"ids": [b["id"] for b in self.builds if b["id"].startswith(projectName)]}


def event(token: str = TOKEN) -> dict[str, Any]:
    job = {"id": "j1", "prefix": PREFIX, "job_key": f"{PREFIX}job.json", "platform": "x86_64", "max_seconds": 36}
    run = {"bucket": "bucket", "bundle_key": "bundles/b.zip"}
    return {"token": token, "job": job, "run": run, "execution": "arn:exec", "config": {"runner_heartbeat_seconds": 20}}


def test_start_keeps_the_token_out_of_the_build_and_is_idempotent_per_token() -> None:
    s3, codebuild = S3(), CodeBuild()
    first = start(event(), s3, codebuild, SETTINGS)
    (params,) = codebuild.started
    assert TOKEN not in json.dumps(params)
    variables = {v["name"]: v["value"] for v in params["environmentVariablesOverride"]}
    assert variables["WF_TOKEN_KEY"] == f"{PREFIX}token" and variables["WF_EXECUTION"] == "arn:exec"
    assert s3.objects[f"{PREFIX}token"] == TOKEN.encode()
    assert {"Key": f"{PREFIX}token", "ServerSideEncryption": "AES256", "ContentType": "text/plain"} in s3.puts
    assert params["timeoutInMinutesOverride"] == 5 and params["buildspecOverride"] == "version: 0.2\n"
    assert params["computeTypeOverride"] == "BUILD_GENERAL1_SMALL" and params["serviceRoleOverride"] == "ext-role"
    assert json.loads(s3.objects[f"{PREFIX}build.json"])["build_id"] == first["build_id"] == "proj-x86:1"
    again = start(event(), s3, codebuild, SETTINGS)
    assert again == {**first, "reused": True} and len(codebuild.started) == 1
    other = start(event("another-token"), s3, codebuild, SETTINGS)  # a new attempt: the old build's token is dead
    assert codebuild.stopped == ["proj-x86:1"] and other["build_id"] == "proj-x86:2"


@pytest.mark.parametrize(("kind", "role"), [("extension", "ext-role"), ("test", "ext-role"), ("pytorch", None)])
def test_builds_that_run_an_extensions_code_get_the_extension_role(kind: str, role: str | None) -> None:
    """A test job installs and imports the extension (its published bytes): never the framework's role."""
    s3, codebuild = S3(), CodeBuild()
    contract = json.loads(s3.objects[f"{PREFIX}job.json"])
    s3.objects[f"{PREFIX}job.json"] = json.dumps({**contract, "kind": kind}).encode()
    start(event(), s3, codebuild, SETTINGS)
    (params,) = codebuild.started
    assert params.get("serviceRoleOverride") == role


def test_timeout_minutes_stay_within_codebuilds_range() -> None:
    assert [timeout_minutes(s) for s in (1, 300, 301, 8 * 3600, 10**6)] == [5, 5, 6, 480, 2160]


class Sfn:
    def __init__(self, error: str | None = None) -> None:
        self.failures: list[dict[str, str]] = []
        self.error = error

    def send_task_failure(self, **kwargs: str) -> None:
        if self.error:
            raise ClientError({"Error": {"Code": self.error, "Message": "x"}}, "SendTaskFailure")
        self.failures.append(kwargs)

    def describe_execution(self, executionArn: str) -> dict[str, str]:
        return {"status": "RUNNING" if executionArn == "arn:running" else "SUCCEEDED"}


def detail(project: str = "proj-x86", key: str = f"{PREFIX}token", status: str = "FAILED") -> dict[str, Any]:
    env = [{"name": "WF_TOKEN_KEY", "value": key, "type": "PLAINTEXT"}]
    phases = [{"phase-type": "INSTALL", "phase-status": "FAILED", "phase-context": [{"message": "exit 7"}]}]
    info = {"environment": {"environment-variables": env}, "phases": phases}
    return {
        "project-name": project,
        "build-status": status,
        "build-id": f"arn:aws:codebuild:us-east-1:123456789012:build/{project}:1",
        "additional-information": info,
    }


@pytest.mark.parametrize(
    ("given", "action"),
    [
        (detail(project="someone-elses"), "ignored"),
        (detail(key="sources/evil/token"), "ignored"),
        (detail(key="runs/../jobs/x/token"), "ignored"),
        (detail(key="runs/r1/jobs/other/token"), "already-ended"),  # no such token (deleted): nothing to fail
        (detail(), "failed-task"),
    ],
)
def test_the_state_change_callback_fails_only_this_stacks_tokens(given: dict[str, Any], action: str) -> None:
    s3, sfn = S3(), Sfn()
    s3.objects[f"{PREFIX}token"] = TOKEN.encode()
    assert on_build_state(given, CodeBuild(), s3, sfn, SETTINGS)["action"] == action
    if action == "failed-task":
        (failure,) = sfn.failures
        assert failure["taskToken"] == TOKEN and failure["error"] == "BuildFailed"
        assert failure["cause"] == "CodeBuild build proj-x86:1 ended FAILED in phase INSTALL (FAILED: exit 7)"
    else:
        assert sfn.failures == []


IMAGES = BuildSettings("bucket", SETTINGS.projects, "ext-role", image_project="proj-images")
IMAGE_TOKEN = "runs/r1/jobs/image-torch2.5.1-cpu-py3.12-x86_64/token"  # wheelfoundry.aws.image_builds.token_key


def test_an_image_build_that_died_before_calling_back_fails_its_token_only_with_the_image_project_known() -> None:
    s3, sfn = S3(), Sfn()
    s3.objects[IMAGE_TOKEN] = TOKEN.encode()
    given = detail(project="proj-images", key=IMAGE_TOKEN, status="TIMED_OUT")
    assert on_build_state(given, CodeBuild(), s3, sfn, SETTINGS)["action"] == "ignored"  # the old blind spot
    assert on_build_state(given, CodeBuild(), s3, sfn, IMAGES)["action"] == "failed-task"
    (failure,) = sfn.failures
    assert failure["taskToken"] == TOKEN and failure["error"] == "BuildFailed"
    assert failure["cause"].startswith("CodeBuild build proj-images:1 ended TIMED_OUT")
    del s3.objects[IMAGE_TOKEN]  # the image job called back (and deleted its token) before its build failed
    assert on_build_state(given, CodeBuild(), s3, Sfn(), IMAGES)["action"] == "already-ended"


def test_a_task_that_already_ended_is_not_an_error() -> None:
    s3 = S3()
    s3.objects[f"{PREFIX}token"] = TOKEN.encode()
    assert on_build_state(detail(), CodeBuild(), s3, Sfn("TaskTimedOut"), SETTINGS)["action"] == "already-ended"


def build(build_id: str, execution: str, status: str = "IN_PROGRESS") -> dict[str, Any]:
    env = [{"name": "WF_EXECUTION", "value": execution}]
    return {"id": build_id, "buildStatus": status, "environment": {"environmentVariables": env}}


def test_the_reaper_stops_the_builds_of_an_ended_execution_and_on_the_sweep_of_any_ended_one() -> None:
    builds = [build("proj-x86:1", "arn:failed"), build("proj-x86:2", "arn:running"), build("proj-arm:1", "arn:gone")]
    builds.append(build("proj-x86:3", "arn:failed", "SUCCEEDED"))
    codebuild = CodeBuild(builds)
    ended = {"source": "aws.states", "detail": {"executionArn": "arn:failed", "status": "ABORTED"}}
    assert reap_builds(ended, codebuild, Sfn(), ["proj-x86", "proj-arm"])["stopped"] == ["proj-x86:1"]
    codebuild.stopped.clear()
    sweep = {"source": "aws.events", "detail-type": "Scheduled Event"}
    assert reap_builds(sweep, codebuild, Sfn(), ["proj-x86", "proj-arm"])["stopped"] == ["proj-x86:1", "proj-arm:1"]


def test_the_reaper_stops_the_image_builds_of_an_ended_execution() -> None:
    builds = [
        build("proj-images:1", "arn:failed"),
        build("proj-images:2", "arn:running"),
        build("proj-x86:1", "arn:gone"),
    ]
    codebuild = CodeBuild(builds)
    ended = {"source": "aws.states", "detail": {"executionArn": "arn:failed", "status": "ABORTED"}}
    assert reap_builds(ended, codebuild, Sfn(), IMAGES.stack_projects)["stopped"] == ["proj-images:1"]
    sweep = {"source": "aws.events", "detail-type": "Scheduled Event"}
    assert sorted(reap_builds(sweep, codebuild, Sfn(), IMAGES.stack_projects)["stopped"]) == [
        "proj-images:1",
        "proj-x86:1",
    ]
    assert (
        IMAGES.stack_projects == ("proj-x86", "proj-arm", "proj-images")
        and "proj-images" not in SETTINGS.stack_projects
    )


def test_the_runner_reads_the_token_from_s3_only_when_none_is_given(tmp_path: Path) -> None:
    from wfbuild.runner.runner import Job

    s3 = S3()
    s3.objects[f"{PREFIX}token"] = TOKEN.encode() + b"\n"
    env = {"WF_BUCKET": "bucket", "WF_JOB_KEY": f"{PREFIX}job.json", "WF_WORK_DIR": str(tmp_path / "w")}
    clients = {"s3": s3, "stepfunctions": Sfn()}
    assert Job({**env, "WF_TOKEN_KEY": f"{PREFIX}token"}, clients).token == TOKEN
    assert TOKEN not in json.dumps(Job({**env, "WF_TOKEN_KEY": f"{PREFIX}token"}, clients).environ)
    assert Job({**env, "WF_TOKEN_KEY": f"{PREFIX}token", "WF_TASK_TOKEN": "given"}, clients).token == "given"
    with pytest.raises(ValueError, match="cannot read the task token"):
        Job({**env, "WF_TOKEN_KEY": "runs/r1/jobs/none/token"}, clients)
