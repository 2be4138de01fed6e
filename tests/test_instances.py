"""Launch, await, terminate, reap and the callback backstops, against moto's EC2/SSM/Step Functions."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from moto import mock_aws

from wheelfoundry.aws import tags as T
from wheelfoundry.aws.callback import on_event
from wheelfoundry.aws.instances import LaunchSettings, await_agent, client_token, launch, reap
from wheelfoundry.errors import AgentNotReady, CapacityUnavailable, InstanceLost, LaunchFailed

STACK = "wf-test"
EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:wf-test-build:run-1"
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


@pytest.fixture
def aws() -> Any:
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        ssm = boto3.client("ssm", region_name="us-east-1")
        template = ec2.create_launch_template(LaunchTemplateName="lt", LaunchTemplateData={})["LaunchTemplate"]
        settings = LaunchSettings(
            stack=STACK,
            launch_templates={"x86_64": template["LaunchTemplateId"], "aarch64": template["LaunchTemplateId"]},
            ami_parameters={
                "x86_64": "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64",
                "aarch64": "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64",
            },
            subnets=(),
        )
        yield ec2, ssm, settings


class Sfn:
    """DescribeExecution answers from a script: RUNNING unless told otherwise."""

    def __init__(self, *statuses: str) -> None:
        self.statuses = list(statuses)

    def describe_execution(self, executionArn: str) -> dict[str, str]:
        return {"status": self.statuses.pop(0) if self.statuses else "RUNNING"}


RUNNING = Sfn()


def event(job_id: str = "torch2.5.1-cpu-x86_64", spot: bool = True, execution: str = EXECUTION) -> dict[str, Any]:
    job = {"id": job_id, "platform": "x86_64", "instance_type": "c7i.8xlarge", "spot": spot, "max_seconds": 3600}
    return {"job": job, "run": {"id": "run-1"}, "execution": execution}


def live(ec2: Any) -> list[dict[str, Any]]:
    return T.find_instances(ec2, {T.STACK: STACK}, states=("pending", "running"))


def test_launch_tags_watchdog_and_spot(aws: Any) -> None:
    ec2, ssm, settings = aws
    result = launch(event(), ec2, ssm, RUNNING, settings, NOW)
    (instance,) = live(ec2)
    assert instance["InstanceId"] == result["instance_id"] and result["market"] == "spot"
    tags = T.tags_of(instance)
    assert tags[T.EXECUTION] == EXECUTION and tags[T.JOB] == "torch2.5.1-cpu-x86_64"
    assert datetime.fromisoformat(tags[T.EXPIRES_AT]) == NOW + timedelta(hours=1, minutes=30)
    data = ec2.describe_instance_attribute(InstanceId=result["instance_id"], Attribute="userData")
    script = base64.b64decode(data["UserData"]["Value"]).decode()
    assert "shutdown -h +90" in script


def test_a_retried_launch_does_not_start_a_second_instance(aws: Any) -> None:
    ec2, ssm, settings = aws
    first = launch(event(), ec2, ssm, RUNNING, settings, NOW)
    again = launch(event(), ec2, ssm, RUNNING, settings, NOW)
    assert again == {"instance_id": first["instance_id"], "market": "spot", "reused": True}
    assert len(live(ec2)) == 1
    other = launch(event(spot=False), ec2, ssm, RUNNING, settings, NOW)  # on-demand relaunch is a new instance
    assert other["instance_id"] != first["instance_id"] and len(live(ec2)) == 2


def test_no_launch_for_a_stopped_execution_and_no_orphan_from_a_late_one(aws: Any) -> None:
    ec2, ssm, settings = aws
    with pytest.raises(LaunchFailed, match="the execution is ABORTED"):
        launch(event(), ec2, ssm, Sfn("ABORTED"), settings, NOW)
    assert live(ec2) == []
    with pytest.raises(LaunchFailed, match="terminated i-"):
        launch(event(), ec2, ssm, Sfn("RUNNING", "ABORTED"), settings, NOW)  # stopped during RunInstances
    assert live(ec2) == []


def test_client_token_is_stable_and_short() -> None:
    token = client_token(EXECUTION, "job", "spot")
    assert token == client_token(EXECUTION, "job", "spot") and len(token) <= 64
    assert token != client_token(EXECUTION, "job", "ondemand")


@pytest.mark.parametrize(
    ("code", "error"), [("InsufficientInstanceCapacity", CapacityUnavailable), ("UnauthorizedOperation", LaunchFailed)]
)
def test_launch_errors_are_typed(aws: Any, code: str, error: type[Exception]) -> None:
    ec2, ssm, settings = aws
    with Stubber(ec2) as stub:
        stub.add_response("describe_instances", {"Reservations": []})
        stub.add_client_error("run_instances", service_error_code=code)
        with pytest.raises(error):
            launch(event(), ec2, ssm, RUNNING, settings, NOW)


def test_await_agent(aws: Any) -> None:
    ec2, ssm, settings = aws
    instance_id = launch(event(), ec2, ssm, RUNNING, settings, NOW)["instance_id"]
    with Stubber(ssm) as stub:
        stub.add_response("describe_instance_information", {"InstanceInformationList": []})
        with pytest.raises(AgentNotReady):
            await_agent(instance_id, ec2, ssm)
        stub.add_response(
            "describe_instance_information",
            {"InstanceInformationList": [{"InstanceId": instance_id, "PingStatus": "Online"}]},
        )
        assert await_agent(instance_id, ec2, ssm)["ping"] == "Online"
    ec2.terminate_instances(InstanceIds=[instance_id])
    with pytest.raises(InstanceLost, match="terminated"):
        await_agent(instance_id, ec2, ssm)


def test_reaper_on_execution_failure_spares_kept_instances_but_not_aborts(aws: Any) -> None:
    ec2, ssm, settings = aws
    plain = launch(event("a"), ec2, ssm, RUNNING, settings, NOW)["instance_id"]
    kept = launch(event("b"), ec2, ssm, RUNNING, settings, NOW)["instance_id"]
    other = launch(event("c", execution=EXECUTION + "-other"), ec2, ssm, RUNNING, settings, NOW)["instance_id"]
    ec2.create_tags(Resources=[kept], Tags=[{"Key": T.KEPT, "Value": "true"}])
    failed = {"source": "aws.states", "detail": {"executionArn": EXECUTION, "status": "FAILED"}}
    assert reap(failed, ec2, STACK, NOW)["terminated"] == [plain]
    aborted = {"source": "aws.states", "detail": {"executionArn": EXECUTION, "status": "ABORTED"}}
    assert reap(aborted, ec2, STACK, NOW)["terminated"] == [kept]
    assert [i["InstanceId"] for i in live(ec2)] == [other]


def test_scheduled_reaper_ends_only_expired_instances(aws: Any) -> None:
    ec2, ssm, settings = aws
    young = launch(event("a"), ec2, ssm, RUNNING, settings, NOW)["instance_id"]
    old = launch(event("b"), ec2, ssm, RUNNING, settings, NOW - timedelta(hours=3))["instance_id"]
    result = reap({"source": "aws.events", "detail-type": "Scheduled Event"}, ec2, STACK, NOW)
    assert result["terminated"] == [old]
    assert [i["InstanceId"] for i in live(ec2)] == [young]


def test_callback_ignores_other_stacks_spot_instances(aws: Any) -> None:
    ec2, ssm, _ = aws
    foreign = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    warning = {"detail-type": "EC2 Spot Instance Interruption Warning", "detail": {"instance-id": foreign}}
    assert on_event(warning, ec2, ssm, sfn, STACK)["action"] == "ignored"


def test_callback_fails_the_token_of_a_failed_command(aws: Any) -> None:
    ec2, ssm, _ = aws
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    detail = {"command-id": "11111111-2222-3333-4444-555555555555", "instance-id": "i-1", "status": "TimedOut"}
    with Stubber(ssm) as ssm_stub, Stubber(sfn) as sfn_stub:
        ssm_stub.add_response(
            "list_commands",
            {"Commands": [{"CommandId": "11111111-2222-3333-4444-555555555555", "Parameters": {"TaskToken": ["tok"]}}]},
        )
        ssm_stub.add_response(
            "get_command_invocation", {"StandardOutputContent": "last words", "StandardErrorContent": ""}
        )
        sfn_stub.add_response(
            "send_task_failure",
            {},
            {
                "taskToken": "tok",
                # the job's time limit (SSM's ExecutionTimeout): the state machine relaunches it once
                "error": "BuildTimedOut",
                "cause": "SSM command 11111111-2222-3333-4444-555555555555 on i-1 ended TimedOut. last words",
            },
        )
        result = on_event(
            {"detail-type": "EC2 Command Invocation Status-change Notification", "detail": detail}, ec2, ssm, sfn, STACK
        )
    assert result["action"] == "failed-task"
    with Stubber(ssm) as ssm_stub, Stubber(sfn) as sfn_stub:  # the runner already called back: not an error
        ssm_stub.add_response(
            "list_commands",
            {"Commands": [{"CommandId": "11111111-2222-3333-4444-555555555555", "Parameters": {"TaskToken": ["tok"]}}]},
        )
        ssm_stub.add_response("get_command_invocation", {"StandardOutputContent": "", "StandardErrorContent": ""})
        sfn_stub.add_client_error("send_task_failure", service_error_code="TaskTimedOut")
        result = on_event(
            {"detail-type": "EC2 Command Invocation Status-change Notification", "detail": detail}, ec2, ssm, sfn, STACK
        )
    assert result["action"] == "already-ended"
    with pytest.raises(ClientError), Stubber(sfn) as sfn_stub:
        sfn_stub.add_client_error("send_task_failure", service_error_code="AccessDenied")
        sfn.send_task_failure(taskToken="t", error="e", cause="c")


def test_an_extension_job_runs_with_the_extension_instance_profile(aws: Any) -> None:
    ec2, ssm, settings = aws
    iam = boto3.client("iam", region_name="us-east-1")
    profiles = {
        name: iam.create_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Arn"]
        for name in ("framework", "extension")
    }
    settings = LaunchSettings(**{**settings.__dict__, "extension_profile": profiles["extension"]})
    untrusted = event("my-ext-cpu-x86_64")
    untrusted["job"]["trust"] = "extension"
    launch(untrusted, ec2, ssm, RUNNING, settings, NOW)
    launch(event(), ec2, ssm, RUNNING, settings, NOW)  # a framework job keeps the launch template's profile
    by_job = {T.tags_of(i)[T.JOB]: i.get("IamInstanceProfile", {}).get("Arn") for i in live(ec2)}
    assert by_job == {"my-ext-cpu-x86_64": profiles["extension"], "torch2.5.1-cpu-x86_64": None}
