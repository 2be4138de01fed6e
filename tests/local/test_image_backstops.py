"""The backstops of a runtime image build (issue 11), in the embedded AWS with the shipped template:
a build on RuntimeImageProject that dies before its image job calls back fails the BuildImage task
through the CodeBuild state-change rule (not at the state's 65-minute timeout), and the build of an
aborted execution is stopped by the reaper's execution-ended rule.

The stack's state machine is narrowed to the shipped ASL's BuildImage state (the BuildImages Map's
item processor, behind a Pass that selects what the Map's ItemSelector gives it), so its executions
are the stack's own: the Reaper's rule matches them, and no build or publish runs first. The image
job is a stub buildspec in a stub bundle: the real one needs the index and Docker.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from wheelfoundry_local import DeployedStack, EmbeddedAws

from .conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
IMAGE_ID = "image-torch2.5.1-cpu-py3.12-x86_64"


@pytest.fixture
def stack(aws: EmbeddedAws) -> Iterator[DeployedStack]:
    yield aws.deploy(ROOT / "template.yaml")


def build_image_only(aws: EmbeddedAws, stack: DeployedStack) -> None:
    """Replace the stack's state machine definition with its own BuildImage state."""
    definition = json.loads((ROOT / "statemachine/build.asl.json").read_text())
    processor = definition["States"]["BuildImages"]["ItemProcessor"]
    images = aws.client("lambda").get_function(FunctionName=stack.function_name("ImagesFunction"))
    text = json.dumps(processor["States"]).replace("${ImagesFunctionArn}", images["Configuration"]["FunctionArn"])
    select = {"image.$": "$.image", "run.$": "$.run", "execution.$": "$$.Execution.Id"}
    states = {"Select": {"Type": "Pass", "Parameters": select, "Next": processor["StartAt"]}, **json.loads(text)}
    narrowed = json.dumps({"StartAt": "Select", "States": states})
    aws.client("stepfunctions").update_state_machine(stateMachineArn=stack.state_machine_arn, definition=narrowed)


def image_request(aws: EmbeddedAws, stack: DeployedStack, run: str, phases: dict[str, list[str]]) -> dict[str, Any]:
    """A bundle whose codebuild/image.yml runs `phases`, and the BuildImage state's input for it. Each
    execution is its own run, as on AWS: the token's key (runs/<run>/jobs/<image>/token) is the run's."""
    spec = {"version": 0.2, "env": {"shell": "bash"}, "phases": {k: {"commands": v} for k, v in phases.items()}}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("codebuild/image.yml", yaml.safe_dump(spec))
    key = f"bundles/{hashlib.sha256(buffer.getvalue()).hexdigest()}.zip"
    bucket = stack.outputs["WheelBucketName"]
    aws.client("s3").put_object(Bucket=bucket, Key=key, Body=buffer.getvalue())
    # Validate's image summary; 90 s so that a missing backstop fails this test at States.Timeout
    image = {"id": IMAGE_ID, "key": f"runs/{run}/images/{IMAGE_ID}/image.json", "timeout_seconds": 90}
    image["compute_type"] = "BUILD_GENERAL1_MEDIUM"
    return {"image": image, "run": {"id": run, "bucket": bucket, "bundle_key": key}}


def image_builds(aws: EmbeddedAws, stack: DeployedStack) -> list[Any]:
    assert aws.codebuild is not None
    return [b for b in aws.codebuild.builds() if b.project == stack.physical_id("RuntimeImageProject")]


def test_a_dead_image_build_fails_its_task_and_an_aborted_executions_image_build_is_stopped(
    aws: EmbeddedAws, stack: DeployedStack
) -> None:
    # One deploy for both cases (CI time): their executions run side by side, each with its own bundle.
    build_image_only(aws, stack)
    dies = image_request(aws, stack, "r1", {"install": ["echo no docker here >&2", "exit 7"], "build": ["sleep 60"]})
    started = time.monotonic()
    dead = aws.start_execution(stack.state_machine_arn, dies)
    aborted = aws.start_execution(stack.state_machine_arn, image_request(aws, stack, "r2", {"build": ["sleep 120"]}))

    # 1. The build failed in INSTALL, before any image job could call back: the state-change rule failed
    # the BuildImage task (caught by its ImageFailed Pass), long before the state's timeout.
    result = aws.wait_execution(dead, timeout=120)
    # before the state's own 90 s timeout (image_request) on any host; the outcome below says it was the rule
    assert result.status == "SUCCEEDED" and time.monotonic() - started < 90
    outcome = result.output
    assert outcome["id"] == IMAGE_ID and outcome["status"] == "failed" and outcome["error"] == "BuildFailed"
    assert "ended FAILED in phase INSTALL" in outcome["cause"]
    failed = next(b for b in image_builds(aws, stack) if b.status == "FAILED")
    assert outcome["cause"].startswith(f"CodeBuild build {failed.id} ")
    (delivery,) = aws.events.deliveries(stack.rule_name("CallbackFunctionBuildState"))
    assert delivery.result == {"action": "failed-task", "build": failed.id, "status": "FAILED"}

    # 2. The other execution is aborted while its image build runs: the reaper stops that build.
    wait_for(lambda: [b for b in image_builds(aws, stack) if b.status == "IN_PROGRESS"], 30)
    (running,) = [b for b in image_builds(aws, stack) if b.status == "IN_PROGRESS"]
    assert {v["name"]: v["value"] for v in running.variables}["WF_EXECUTION"] == aborted
    aws.client("stepfunctions").stop_execution(executionArn=aborted, error="Cancelled", cause="by the test")
    wait_for(lambda: running.status == "STOPPED", 30)
    reaper = aws.events.deliveries(stack.rule_name("ReaperFunctionExecutionEnded"))
    assert [d.result["stopped"] for d in reaper if d.result.get("stopped")] == [[running.id]]
    # Its STOPPED state change reaches the callback as one of this stack's builds (the execution, and with
    # it the task, has ended; the emulator accepts a late SendTaskFailure where AWS answers TaskTimedOut).
    wait_for(lambda: len(aws.events.deliveries(stack.rule_name("CallbackFunctionBuildState"))) == 2, 10)
    late = aws.events.deliveries(stack.rule_name("CallbackFunctionBuildState"))[1]
    assert late.result["build"] == running.id and late.result["action"] in ("failed-task", "already-ended")
