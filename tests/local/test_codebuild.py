"""The local CodeBuild: projects from the template, the buildspec's phases as CodeBuild runs them,
BatchGetBuilds, StopBuild, timeouts and state-change events to the stack's rules."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.exceptions import ClientError

from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_local.testing import assert_no_builds

from .conftest import wait_for
from .test_agent import alive

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def stack(aws: EmbeddedAws) -> Iterator[DeployedStack]:
    yield aws.deploy(ROOT / "template.yaml")
    assert_no_builds(aws)


def start(aws: EmbeddedAws, stack: DeployedStack, phases: dict[str, Any], **kwargs: Any) -> str:
    spec = yaml.safe_dump({"version": 0.2, "env": {"variables": {"FROM_SPEC": "spec", "B": "spec"}}, "phases": phases})
    build = aws.client("codebuild").start_build(
        projectName=stack.physical_id("CodeBuildProjectX86"), buildspecOverride=spec, **kwargs
    )["build"]
    return str(build["id"])


def finished(aws: EmbeddedAws, build_id: str, timeout: float = 20) -> dict[str, Any]:
    codebuild = aws.client("codebuild")
    wait_for(lambda: codebuild.batch_get_builds(ids=[build_id])["builds"][0]["buildStatus"] != "IN_PROGRESS", timeout)
    build: dict[str, Any] = codebuild.batch_get_builds(ids=[build_id])["builds"][0]
    return build


def phases(build: dict[str, Any]) -> dict[str, str | None]:
    return {p["phaseType"]: p.get("phaseStatus") for p in build["phases"]}


def log(aws: EmbeddedAws, build_id: str) -> str:
    assert aws.codebuild is not None
    return aws.codebuild.log_text(build_id)


def test_the_templates_projects_exist_with_their_environment(aws: EmbeddedAws, stack: DeployedStack) -> None:
    names = [stack.physical_id("CodeBuildProjectX86"), stack.physical_id("CodeBuildProjectArm64")]
    x86, arm = aws.client("codebuild").batch_get_projects(names=names)["projects"]
    assert (x86["environment"]["type"], arm["environment"]["type"]) == ("LINUX_CONTAINER", "ARM_CONTAINER")
    assert x86["environment"]["privilegedMode"] is True and x86["source"]["type"] == "NO_SOURCE"
    assert {"name": "WF_CONTAINER", "value": "docker", "type": "PLAINTEXT"} in x86["environment"][
        "environmentVariables"
    ]
    assert stack.outputs["CodeBuildProjects"] == ",".join(names)


def test_phases_run_in_order_with_overrides_first_and_post_build_after_a_failed_build(
    aws: EmbeddedAws, stack: DeployedStack
) -> None:
    build_id = start(
        aws,
        stack,
        {
            "install": {"commands": ["echo install A=$A B=$B spec=$FROM_SPEC container=$WF_CONTAINER"]},
            "pre_build": {"commands": ["echo pre"]},
            "build": {"commands": ["echo building", "exit 3", "echo never"]},
            "post_build": {"commands": ["echo post succeeding=$CODEBUILD_BUILD_SUCCEEDING"]},
        },
        environmentVariablesOverride=[{"name": "A", "value": "1", "type": "PLAINTEXT"}, {"name": "B", "value": "2"}],
        timeoutInMinutesOverride=5,
    )
    build = finished(aws, build_id)
    assert build["buildStatus"] == "FAILED" and build["buildComplete"] is True and build["currentPhase"] == "COMPLETED"
    assert phases(build) == {
        "SUBMITTED": "SUCCEEDED",
        "QUEUED": "SUCCEEDED",
        "PROVISIONING": "SUCCEEDED",
        "DOWNLOAD_SOURCE": "SUCCEEDED",
        "INSTALL": "SUCCEEDED",
        "PRE_BUILD": "SUCCEEDED",
        "BUILD": "FAILED",
        "POST_BUILD": "SUCCEEDED",
        "UPLOAD_ARTIFACTS": "SUCCEEDED",
        "FINALIZING": "SUCCEEDED",
        "COMPLETED": None,
    }
    text = log(aws, build_id)
    # StartBuild's variables over the buildspec's; the project's WF_CONTAINER=docker is none on this host.
    assert "install A=1 B=2 spec=spec container=none" in text
    assert "never" not in text.replace("Running command echo never", "")
    assert "post succeeding=0" in text
    assert build["timeoutInMinutes"] == 5 and build["logs"]["deepLink"].startswith("file://")
    # The project's log group (the stack's, with its retention), one stream per build.
    where = build["logs"]
    assert where["groupName"] == "/aws/codebuild/wheelfoundry-build" and where["streamName"].startswith("x86_64/")
    events = aws.client("logs").get_log_events(logGroupName=where["groupName"], logStreamName=where["streamName"])
    assert any("post succeeding=0" in e["message"] for e in events["events"])


@pytest.mark.parametrize(("on_failure", "runs_build"), [("ABORT", False), ("CONTINUE", True)])
def test_a_failed_install_aborts_unless_on_failure_continue(
    aws: EmbeddedAws, stack: DeployedStack, on_failure: str, runs_build: bool
) -> None:
    build_id = start(
        aws,
        stack,
        {
            "install": {"on-failure": on_failure, "commands": ["exit 1"]},
            "build": {"commands": ["echo build ran"]},
        },
    )
    build = finished(aws, build_id)
    assert build["buildStatus"] == "FAILED" and phases(build)["INSTALL"] == "FAILED"
    assert ("build ran\n" in log(aws, build_id)) is runs_build


def test_stop_build_kills_the_process_group(aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    build_id = start(aws, stack, {"build": {"commands": [f"sleep 300 & echo $! > {pid_file}; wait"]}})
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 10)
    child = int(pid_file.read_text())
    stopped = aws.client("codebuild").stop_build(id=build_id)["build"]
    assert stopped["id"] == build_id
    build = finished(aws, build_id)
    assert build["buildStatus"] == "STOPPED" and phases(build)["BUILD"] == "STOPPED"
    wait_for(lambda: not alive(child), 5)


def test_the_build_timeout_ends_it_timed_out(aws: EmbeddedAws, stack: DeployedStack) -> None:
    assert aws.codebuild is not None
    aws.codebuild.seconds_per_minute = 0.2  # 5 minutes -> 1 s
    started = time.monotonic()
    build_id = start(aws, stack, {"build": {"commands": ["sleep 60"]}}, timeoutInMinutesOverride=5)
    build = finished(aws, build_id)
    assert build["buildStatus"] == "TIMED_OUT" and phases(build)["BUILD"] == "TIMED_OUT"
    assert time.monotonic() - started < 30  # the command alone runs 60 s: under 30, the 1 s timeout ended it


def test_state_changes_reach_the_stacks_rule_and_bad_requests_are_refused(
    aws: EmbeddedAws, stack: DeployedStack
) -> None:
    build_id = start(aws, stack, {"build": {"commands": ["exit 1"]}})
    finished(aws, build_id)
    rule = stack.rule_name("CallbackFunctionBuildState")
    (delivery,) = wait_for_deliveries(aws, rule)
    detail = delivery.event["detail"]
    assert detail["build-status"] == "FAILED" and detail["build-id"].endswith(build_id)
    assert delivery.result["action"] == "ignored"  # a build without a token key: not the state machine's
    codebuild = aws.client("codebuild")
    with pytest.raises(ClientError, match="InvalidInputException"):
        codebuild.start_build(projectName=stack.physical_id("CodeBuildProjectX86"), computeTypeOverride="HUGE")
    with pytest.raises(ClientError, match="ResourceNotFoundException"):
        codebuild.start_build(projectName="not-a-project")
    assert codebuild.batch_get_builds(ids=["nope:1"])["buildsNotFound"] == ["nope:1"]
    newest_first = codebuild.list_builds_for_project(projectName=stack.physical_id("CodeBuildProjectX86"))["ids"]
    assert newest_first == [build_id]


def wait_for_deliveries(aws: EmbeddedAws, rule: str) -> list[Any]:
    wait_for(lambda: aws.events.deliveries(rule), 10)
    return aws.events.deliveries(rule)


def test_the_same_idempotency_token_returns_the_same_build(aws: EmbeddedAws, stack: DeployedStack) -> None:
    first = start(aws, stack, {"build": {"commands": ["true"]}}, idempotencyToken="t-1")
    again = start(aws, stack, {"build": {"commands": ["true"]}}, idempotencyToken="t-1")
    assert first == again
    finished(aws, first)
