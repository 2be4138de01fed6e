"""The CodeBuild executor end to end: the shipped template and ASL, the local CodeBuild running the
real buildspecs/codebuild/build.yml (and so the real runner) on this host.

Jobs are put on CodeBuild by wrapping the planner (the Validate Lambda runs in-process), so these
tests do not depend on how `executor: auto` chooses. Every test ends with no instance pending or
running and no build IN_PROGRESS.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.workflow.conftest import (
    ROOT,
    extension_request,
    launched_by,
    run,
    s3_json,
    s3_keys,
    source,
    upload,
    wait_for,
)
from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_local.testing import assert_no_builds, assert_no_instances

BROKEN_C = "this is not C;\n"
SLOW_SETUP = "import time\ntime.sleep({seconds})\n" + (ROOT / "tests/fixtures/tiny_ext/setup.py").read_text()


@pytest.fixture
def stack(aws: EmbeddedAws, parameters: dict[str, Any]) -> Iterator[DeployedStack]:
    aws.registration.delay = 0.0
    yield aws.deploy(ROOT / "template.yaml", parameters)
    assert_no_instances(aws)
    assert_no_builds(aws)


def on_codebuild(monkeypatch: pytest.MonkeyPatch, choose: Callable[[Any], bool] = lambda job: True) -> None:
    """Put the jobs `choose` picks on CodeBuild, whatever the planner decided."""
    import wheelfoundry.aws.runs as runs

    plan_request = runs.plan_request

    def planned(*args: Any, **kwargs: Any) -> Any:
        plan = plan_request(*args, **kwargs)
        jobs = tuple(dataclasses.replace(j, executor="codebuild") if choose(j) else j for j in plan.jobs)
        return dataclasses.replace(plan, jobs=jobs)

    monkeypatch.setattr(runs, "plan_request", planned)


def job_ids(aws: EmbeddedAws) -> list[str]:
    (validate,) = aws.invocations.of("ValidateFunction")
    return [j["id"] for j in validate.result["jobs"]]


def install_and_import(aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path) -> str:
    """A user's view, cheaply: pip takes the wheel from the index (and only from it) into a folder
    this venv (which has torch) imports; the compiled function runs."""
    from wheelfoundry_cli.index_server import serving

    target = tmp_path / "installed"
    with serving(aws.client("s3"), stack.outputs["WheelBucketName"]) as base:
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--isolated", "--no-deps", "--target", str(target)]
        subprocess.run([*pip, "--index-url", f"{base}/simple/ci/", "wf-tiny-ext"], check=True)
    probe = "import sys; sys.path.insert(0, sys.argv[1]); import wf_tiny_ext as m; assert m.add(2, 3) == 5; print(m.__file__)"
    done = subprocess.run([sys.executable, "-c", probe, str(target)], check=True, capture_output=True, text=True)
    return done.stdout


def builds(aws: EmbeddedAws) -> list[Any]:
    assert aws.codebuild is not None
    return aws.codebuild.builds()


@pytest.mark.heavy  # a whole run with real builds: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_the_extension_is_built_on_codebuild_published_and_installable(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The request's own executor option, through the real planner (compute type included).
    request = extension_request(upload(aws, stack, source(tmp_path)), options={"executor": "codebuild"})
    result = run(aws, stack, request)
    assert result.succeeded, (result.error, result.cause)
    assert result.output["published"] == 1
    assert aws.instances(states=("pending", "running", "terminated")) == []  # no instance at all
    build, test = builds(aws)  # the build job, then the test job of the published bytes (after Merge)
    # The runner's callback ends the task a moment before the build itself ends (as on CodeBuild).
    wait_for(lambda: build.status != "IN_PROGRESS", 60, "the build to end after its callback")
    assert build.status == "SUCCEEDED" and build.environment["computeType"].startswith("BUILD_GENERAL1_")
    assert build.service_role == stack.physical_id("CodeBuildExtensionRole")  # a user's setup.py: its own role
    assert test.service_role == build.service_role  # the test job imports that code too: the same class
    # The build held a session of that role (never the emulator's keys), and the role as deployed allowed
    # everything it did in S3; the build's own job session did the rest (docs/security.md §2).
    session = f"{stack.physical_id('CodeBuildExtensionRole')}/AWSCodeBuild-{build.id.split(':', 1)[1]}"
    by_build = [d for d in aws.server.iam.decisions if d.principal.endswith(session)]
    assert {d.action for d in by_build} >= {"s3:GetObject", "s3:PutObject"}, by_build
    assert all(d.result == "Allow" for d in by_build), [d for d in by_build if d.result != "Allow"]
    run_id, (job_id,) = result.output["run_id"], job_ids(aws)
    prefix = f"runs/{run_id}/jobs/{job_id}/"
    record = s3_json(aws, stack, f"{prefix}build.json")
    assert record["build_id"] == build.id and record["execution"] == result.arn
    # The token reached the runner through S3 only: not in the build's variables, not in its log.
    assert f"{prefix}token" not in s3_keys(aws, stack, prefix)  # forgotten once the job ended
    start = aws.invocations.of("StartBuildFunction")[0]
    token = start.event["token"]
    assert token not in json.dumps(build.variables) and token not in aws.codebuild.log_text(build.id)  # type: ignore[union-attr]
    assert {v["name"] for v in build.variables} >= {"WF_TOKEN_KEY", "WF_JOB_KEY", "WF_EXECUTION"}
    # The wheel is in the index; install it into a fresh venv and run the extension's tests.
    (wheel,) = [k for k in s3_keys(aws, stack, "wheels/ci/wf-tiny-ext/") if k.endswith(".whl")]
    assert "-cp311-cp311-manylinux" in wheel
    page = aws.client("s3").get_object(Bucket=stack.outputs["WheelBucketName"], Key="simple/ci/wf-tiny-ext/")
    assert wheel.rsplit("/", 1)[1].replace("+", "%2B") in page["Body"].read().decode()
    assert "installed/wf_tiny_ext/__init__.py" in install_and_import(aws, stack, tmp_path)


def stub_bundle(aws: EmbeddedAws, stack: DeployedStack, phases: dict[str, list[str]]) -> None:
    """Make the next runs use a bundle whose codebuild/build.yml runs `phases` (no real build)."""
    import hashlib
    import io
    import zipfile

    import yaml

    spec = {"version": 0.2, "env": {"shell": "bash"}, "phases": {k: {"commands": v} for k, v in phases.items()}}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("codebuild/build.yml", yaml.safe_dump(spec))
    body = buffer.getvalue()
    key = f"bundles/{hashlib.sha256(body).hexdigest()}.zip"
    s3, bucket = aws.client("s3"), stack.outputs["WheelBucketName"]
    s3.put_object(Bucket=bucket, Key=key, Body=body)
    s3.put_object(Bucket=bucket, Key="bundles/current.json", Body=json.dumps({"key": key}).encode())


# What a stub build does with the token it reads from S3 (never from its environment).
TOKEN = 'boto3.client("s3").get_object(Bucket=os.environ["WF_BUCKET"], Key=os.environ["WF_TOKEN_KEY"])["Body"].read().decode()'
FAIL = f'"$WF_TOOLS_PYTHON" -c \'import os, boto3; boto3.client("stepfunctions").send_task_failure(taskToken={TOKEN}, error="BuildFailed", cause="stub build failed")\''
SUCCEED = f'"$WF_TOOLS_PYTHON" -c \'import os, boto3; boto3.client("stepfunctions").send_task_success(taskToken={TOKEN}, output="{{}}")\''


def a_request(aws: EmbeddedAws, stack: DeployedStack) -> dict[str, Any]:
    return extension_request(f"s3://{stack.outputs['WheelBucketName']}/sources/none.tar.gz")


def running_build(aws: EmbeddedAws) -> Any:
    return wait_for(lambda: [b for b in builds(aws) if b.status == "IN_PROGRESS"], 60, "a running build")[0]


@pytest.mark.heavy  # a whole run with real builds: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_a_run_mixing_an_ec2_job_and_a_codebuild_job(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # x86_64 on an instance (a real build); aarch64 on the arm64 project, where the runner's preflight
    # refuses it on this x86_64 host (never cross-compiled) and reports BuildFailed.
    on_codebuild(monkeypatch, lambda job: job.platform == "aarch64")
    result = run(aws, stack, extension_request(upload(aws, stack, source(tmp_path)), platforms=["x86_64", "aarch64"]))
    assert result.status == "FAILED" and result.error == "JobsFailed"
    x86, arm = sorted(job_ids(aws), key=lambda j: "aarch64" in j)
    assert f"1 job(s) failed: {arm}: BuildFailed" in (result.cause or "")
    (wheel,) = [k for k in s3_keys(aws, stack, "wheels/ci/wf-tiny-ext/") if k.endswith(".whl")]
    assert "x86_64" in wheel
    (instance,) = launched_by(aws, result.arn)
    assert instance["Tags"]["wheelfoundry:job"] == x86 and instance["State"]["Name"] == "terminated"
    (build,) = builds(aws)
    # The runner reported; the build then ended FAILED, or was stopped by StopBuildAfterFailure first.
    wait_for(lambda: build.status != "IN_PROGRESS", 60, "the build to end after its callback")
    assert build.project == stack.physical_id("CodeBuildProjectArm64") and build.status in ("FAILED", "STOPPED")
    run_id = result.arn.rsplit(":", 1)[1]
    failed = s3_json(aws, stack, f"runs/{run_id}/jobs/{arm}/result.json")
    assert "this host is x86_64: aarch64 jobs run on aarch64 instances" in failed["cause"]


@pytest.mark.heavy  # a whole run with a real build: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_a_failing_build_is_reported_with_its_log_tail(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_codebuild(monkeypatch)
    result = run(aws, stack, extension_request(upload(aws, stack, source(tmp_path, {"src/core.c": BROKEN_C}))))
    assert result.status == "FAILED" and result.error == "JobsFailed"
    (job_id,) = job_ids(aws)
    assert f"{job_id}: BuildFailed" in (result.cause or "")
    run_id = result.arn.rsplit(":", 1)[1]
    outcome = s3_json(aws, stack, f"runs/{run_id}/jobs/{job_id}/result.json")
    assert outcome["error"] == "BuildFailed" and "this is not C" in outcome["cause"]
    (build,) = builds(aws)
    wait_for(lambda: build.status != "IN_PROGRESS", 60, "the build to end after its callback")
    assert build.status in ("FAILED", "STOPPED")  # ended by itself, or stopped by StopBuildAfterFailure


HEAVY = pytest.mark.heavy  # the retries' real waits and a real build: `make test-heavy`


@pytest.mark.parametrize(
    ("function", "error", "times", "expected"),
    [
        ("StartBuildFunction", "Boom", 1, "Boom"),
        ("CollectFunction", "ManifestInvalid", 1, "ManifestInvalid"),
        pytest.param(
            "StopBuildFunction", "Boom", 5, "NoResult", marks=HEAVY
        ),  # more failures than its retries: StopBuildFailed
    ],
)
def test_an_error_at_each_codebuild_task_state_leaves_no_build_running(
    aws: EmbeddedAws,
    stack: DeployedStack,
    monkeypatch: pytest.MonkeyPatch,
    function: str,
    error: str,
    times: int,
    expected: str,
) -> None:
    on_codebuild(monkeypatch)
    # The stub calls back and keeps running: whatever fails next must stop it.
    stub_bundle(aws, stack, {"build": [SUCCEED if function == "CollectFunction" else FAIL, "sleep 60"]})
    aws.faults.inject(function, error, times=times)
    result = run(aws, stack, a_request(aws, stack), timeout=120)
    assert result.status == "FAILED", result
    assert result.error == expected or expected in (result.cause or ""), (result.error, result.cause)
    if function == "StartBuildFunction":
        assert builds(aws) == []
        return
    # Stopped by StopBuildAfterFailure, or (StopBuild itself failing) by the execution-status reaper.
    (build,) = wait_for(
        lambda: [b for b in builds(aws) if b.status == "STOPPED"],
        30,
        f"the build stopped: {[(b.status, b.phases) for b in builds(aws)]}",
    )
    if function == "CollectFunction":  # stopped by the Catch's StopBuildAfterFailure, not left to the reaper
        assert aws.invocations.of("StopBuildFunction")[-1].result["stopped"] == [build.id]
    if function == "StopBuildFunction":
        reaped = [d for d in aws.events.deliveries() if isinstance(d.result, dict) and d.result.get("stopped")]
        assert reaped and reaped[0].result["stopped"] == [build.id]


def test_a_retried_start_does_not_start_a_second_build(
    aws: EmbeddedAws, stack: DeployedStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_codebuild(monkeypatch)
    stub_bundle(aws, stack, {"build": ["sleep 3", FAIL]})  # calls back once the retry waits again
    # StartBuild succeeds, then the invocation fails as if its response was lost: the ASL retries it.
    aws.faults.inject("StartBuildFunction", "Lambda.ServiceException", after=True)
    result = run(aws, stack, a_request(aws, stack), timeout=120)
    assert result.status == "FAILED" and "stub build failed" in (result.cause or "")
    starts = aws.invocations.of("StartBuildFunction")
    assert len(starts) == 2 and starts[1].result["reused"] is True
    assert len(builds(aws)) == 1


def test_the_build_timeout_fails_the_waiting_task(
    aws: EmbeddedAws, stack: DeployedStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_codebuild(monkeypatch)
    stub_bundle(aws, stack, {"build": ["sleep 120"]})
    assert aws.codebuild is not None
    aws.codebuild.seconds_per_minute = 0.5  # the minimum timeout, 5 CodeBuild minutes, is 2.5 s here
    result = run(aws, stack, {**a_request(aws, stack), "options": {"max_hours": 0.01}}, timeout=120)
    assert result.status == "FAILED" and "BuildFailed" in (result.cause or "")
    assert "ended TIMED_OUT" in (result.cause or ""), result.cause
    (build,) = builds(aws)
    assert build.status == "TIMED_OUT"


def test_a_build_that_fails_before_the_runner_fails_the_task_through_its_state_change_event(
    aws: EmbeddedAws, stack: DeployedStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_codebuild(monkeypatch)
    stub_bundle(aws, stack, {"install": ["echo no tools here >&2", "exit 7"], "build": [SUCCEED]})
    result = run(aws, stack, a_request(aws, stack), timeout=120)
    assert result.status == "FAILED"
    assert "BuildFailed" in (result.cause or "") and "ended FAILED in phase INSTALL" in (result.cause or "")
    (build,) = builds(aws)
    assert build.status == "FAILED"
    (delivery,) = [d for d in aws.events.deliveries() if d.rule == stack.rule_name("CallbackFunctionBuildState")]
    assert delivery.result["action"] == "failed-task"


def test_an_aborted_execution_has_its_build_stopped_by_the_reaper(
    aws: EmbeddedAws, stack: DeployedStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_codebuild(monkeypatch)
    stub_bundle(aws, stack, {"build": ["sleep 120"]})
    arn = aws.start_execution(stack.state_machine_arn, a_request(aws, stack))
    build = running_build(aws)
    aws.client("stepfunctions").stop_execution(executionArn=arn, error="Cancelled", cause="by the test")
    wait_for(lambda: build.status == "STOPPED", 30, "the execution-status reaper")
    assert aws.wait_execution(arn, timeout=10).status == "ABORTED"
    reaper = [d for d in aws.events.deliveries() if d.rule == stack.rule_name("ReaperFunctionExecutionEnded")]
    assert any(d.result.get("stopped") == [build.id] for d in reaper)


class TestShortHeartbeat:
    @pytest.fixture
    def parameters(self) -> dict[str, Any]:
        return {"BuildHeartbeatSeconds": "6"}

    def test_a_silent_build_times_out_on_its_heartbeat_and_is_stopped(
        self, aws: EmbeddedAws, stack: DeployedStack, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        on_codebuild(monkeypatch)
        stub_bundle(aws, stack, {"build": ["sleep 120"]})  # never heartbeats, never calls back
        result = run(aws, stack, a_request(aws, stack), timeout=60)
        assert result.status == "FAILED" and "States.HeartbeatTimeout" in (result.cause or "")
        (build,) = builds(aws)
        assert build.status == "STOPPED"  # by StopBuildAfterFailure
