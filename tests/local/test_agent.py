"""The local SSM agent: registration, validation, running the document's script, statuses, events."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_local.agent import kill_left_behind

from .conftest import launch, online, wait_for


def send(aws: EmbeddedAws, stack: DeployedStack, instance_id: str, **params: str) -> str:
    response = aws.client("ssm").send_command(
        DocumentName=stack.document_name(), InstanceIds=[instance_id], Parameters={k: [v] for k, v in params.items()}
    )
    return str(response["Command"]["CommandId"])


def invocation(aws: EmbeddedAws, command_id: str, instance_id: str) -> dict[str, Any]:
    result: dict[str, Any] = aws.client("ssm").get_command_invocation(CommandId=command_id, InstanceId=instance_id)
    return result


def finished(aws: EmbeddedAws, command_id: str, instance_id: str, timeout: float = 10) -> dict[str, Any]:
    wait_for(lambda: invocation(aws, command_id, instance_id)["Status"] not in ("Pending", "InProgress"), timeout)
    return invocation(aws, command_id, instance_id)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie is dead, merely not yet reaped by whoever inherited it


def instance_root(aws: EmbeddedAws, instance_id: str) -> Path:
    return aws.state_dir / "instances" / instance_id


def terminate(aws: EmbeddedAws, instance_id: str) -> None:
    aws.client("ec2").terminate_instances(InstanceIds=[instance_id])


def recorded_ssm_statuses(aws: EmbeddedAws) -> list[str]:
    return [
        c.event["detail"]["status"] for c in aws.invocations.of("RecorderFunction") if c.event["source"] == "aws.ssm"
    ]


def test_registration_and_describe_instance_information(
    aws: EmbeddedAws, stack: DeployedStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    ssm = aws.client("ssm")
    # The emulated agent registers `delay` seconds after launch; a long delay while asserting "not yet"
    # keeps this test deterministic however slow the host is.
    monkeypatch.setattr(aws.registration, "delay", 3600.0)
    instance_id = launch(aws)
    by_id = [{"Key": "InstanceIds", "Values": [instance_id]}]
    assert ssm.describe_instance_information(Filters=by_id)["InstanceInformationList"] == []
    with pytest.raises(ClientError, match="InvalidInstanceId"):
        send(aws, stack, instance_id)
    aws.registration.delay = 0.0
    online(aws, instance_id)
    (info,) = ssm.describe_instance_information(Filters=by_id)["InstanceInformationList"]
    assert (info["InstanceId"], info["PingStatus"], info["PlatformType"]) == (instance_id, "Online", "Linux")
    legacy = ssm.describe_instance_information(
        InstanceInformationFilterList=[{"key": "InstanceIds", "valueSet": [instance_id]}]
    )
    assert [i["InstanceId"] for i in legacy["InstanceInformationList"]] == [instance_id]
    aws.registration.delay = 3600.0
    other = launch(aws)
    by_other = [{"Key": "InstanceIds", "Values": [other]}]
    assert ssm.describe_instance_information(Filters=by_other)["InstanceInformationList"] == []
    aws.registration.delay = 0.0
    terminate(aws, instance_id)
    terminate(aws, other)
    assert ssm.describe_instance_information()["InstanceInformationList"] == []


def test_send_command_validates_against_the_document(aws: EmbeddedAws, stack: DeployedStack) -> None:
    instance_id = launch(aws)
    online(aws, instance_id)
    ssm = aws.client("ssm")
    with pytest.raises(ClientError, match=r"InvalidParameters.*Bogus is not a parameter"):
        send(aws, stack, instance_id, Bogus="1")
    with pytest.raises(ClientError, match=r"InvalidParameters.*allowedPattern"):
        send(aws, stack, instance_id, Mode="rm -rf /")
    with pytest.raises(ClientError, match="InvalidDocument"):
        ssm.send_command(DocumentName="no-such-document", InstanceIds=[instance_id])
    assert aws.agent is not None and aws.agent.runs() == []
    terminate(aws, instance_id)


def test_script_runs_with_parameters_and_succeeds(aws: EmbeddedAws, stack: DeployedStack) -> None:
    instance_id = launch(aws)
    online(aws, instance_id)
    lines: list[tuple[str, str, str]] = []
    assert aws.agent is not None
    aws.agent.output = lambda *line: lines.append(line)
    try:
        command_id = send(aws, stack, instance_id, Mode="fast", Sleep="0.2")
        assert invocation(aws, command_id, instance_id)["Status"] in ("Pending", "InProgress")
        result = finished(aws, command_id, instance_id)
    finally:
        aws.agent.output = None
    assert (result["Status"], result["ResponseCode"]) == ("Success", 0)
    # Mode is pasted into the script; TaskToken is ENV_VAR, so its {{ }} reference stays literal.
    assert "started mode=fast literal={{ TaskToken }}" in result["StandardOutputContent"]
    assert result["StandardErrorContent"].strip() == "to-stderr"
    assert (instance_id, command_id, "to-stderr") in lines
    log = (instance_root(aws, instance_id) / "logs" / f"{command_id}.log").read_text()
    assert "started mode=fast" in log and "exit code 0: Success" in log
    assert aws.client("ssm").list_commands(CommandId=command_id)["Commands"][0]["Status"] == "Success"
    assert recorded_ssm_statuses(aws) == []  # the fixture's rule only wants failures
    terminate(aws, instance_id)


def test_failure_is_reported_and_delivered_to_the_rule(aws: EmbeddedAws, stack: DeployedStack) -> None:
    instance_id = launch(aws)
    online(aws, instance_id)
    command_id = send(aws, stack, instance_id, ExitCode="3")
    result = finished(aws, command_id, instance_id)
    assert (result["Status"], result["ResponseCode"]) == ("Failed", 3)
    wait_for(lambda: recorded_ssm_statuses(aws) == ["Failed"])
    (call,) = aws.invocations.of("RecorderFunction")
    assert call.event["detail-type"] == "EC2 Command Invocation Status-change Notification"
    detail = call.event["detail"]
    assert (detail["command-id"], detail["instance-id"], detail["document-name"]) == (
        command_id,
        instance_id,
        stack.document_name(),
    )
    assert detail["requested-date-time"].endswith("Z")
    assert call.event["resources"] == [f"arn:aws:ec2:us-east-1:123456789012:instance/{instance_id}"]
    terminate(aws, instance_id)


def test_execution_timeout_kills_the_script(aws: EmbeddedAws, stack: DeployedStack) -> None:
    instance_id = launch(aws)
    online(aws, instance_id)
    command_id = send(aws, stack, instance_id, Sleep="30", Timeout="1")  # timeoutSeconds: "{{ Timeout }}"
    result = finished(aws, command_id, instance_id, timeout=10)
    assert result["Status"] == "TimedOut"
    child = int((instance_root(aws, instance_id) / "child.pid").read_text())
    assert not alive(child)
    wait_for(lambda: recorded_ssm_statuses(aws) == ["TimedOut"])
    terminate(aws, instance_id)


def pid_in(path: Path) -> int:
    """The pid a command's shell wrote: the file is created by its redirection before the number is in it."""
    wait_for(lambda: path.is_file() and path.read_text().strip().isdigit())
    return int(path.read_text())


@pytest.mark.parametrize("how", ["terminate", "cancel"])
def test_instance_death_or_cancel_kills_the_process_group(aws: EmbeddedAws, stack: DeployedStack, how: str) -> None:
    instance_id = launch(aws)
    online(aws, instance_id)
    command_id = send(aws, stack, instance_id, Sleep="30")
    child = pid_in(instance_root(aws, instance_id) / "child.pid")
    script = pid_in(instance_root(aws, instance_id) / "script.pid")
    assert alive(script) and alive(child)
    if how == "terminate":
        terminate(aws, instance_id)
    else:
        aws.client("ssm").cancel_command(CommandId=command_id)
    assert finished(aws, command_id, instance_id, timeout=5)["Status"] == "Cancelled"
    assert not alive(script) and not alive(child)
    wait_for(lambda: recorded_ssm_statuses(aws) == ["Cancelled"])
    if how == "cancel":
        terminate(aws, instance_id)


def test_a_command_runs_niced_and_the_log_says_why_the_agent_killed_it(aws: EmbeddedAws, stack: DeployedStack) -> None:
    instance_id = launch(aws)
    online(aws, instance_id)
    command_id = send(aws, stack, instance_id, Sleep="30")
    pid_in(instance_root(aws, instance_id) / "child.pid")
    script = pid_in(instance_root(aws, instance_id) / "script.pid")
    nice = int(Path(f"/proc/{script}/stat").read_text().rsplit(")", 1)[1].split()[16])
    assert nice == 10, "an instance's command runs below the embedded AWS, which on AWS it never shares a CPU with"
    terminate(aws, instance_id)
    assert finished(aws, command_id, instance_id, timeout=5)["Status"] == "Cancelled"
    log = (instance_root(aws, instance_id) / "logs" / f"{command_id}.log").read_text()
    assert f"Cancelled (instance {instance_id} is terminated)" in log


def test_an_instance_lookup_that_raises_does_not_kill_the_command(
    aws: EmbeddedAws, stack: DeployedStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto's lookup can raise while other threads launch instances; that says nothing about this one."""
    from moto.ec2.models.instances import InstanceBackend

    real = InstanceBackend.get_instance_by_id
    raised = []

    def flaky(backend: Any, instance_id: str) -> Any:
        if len(raised) < 2:
            raised.append(instance_id)
            raise RuntimeError("dictionary changed size during iteration")
        return real(backend, instance_id)

    instance_id = launch(aws)
    online(aws, instance_id)
    before = len(aws.agent.lookup_errors)
    monkeypatch.setattr(InstanceBackend, "get_instance_by_id", flaky)
    command_id = send(aws, stack, instance_id, Sleep="3")
    assert finished(aws, command_id, instance_id, timeout=15)["Status"] == "Success"
    assert raised == [instance_id, instance_id]
    errors = aws.agent.lookup_errors[before:]
    assert len(errors) == 2 and "RuntimeError: dictionary changed size" in errors[0]
    terminate(aws, instance_id)


def test_a_heartbeat_before_the_task_sets_its_clock_counts_as_on_aws(aws: EmbeddedAws) -> None:
    """The runner beats as it starts; moto would refuse a beat that beats its own clock set-up (InvalidToken)."""
    from moto.stepfunctions.parser.asl.eval.callback.callback import CallbackEndpoint

    endpoint = CallbackEndpoint(callback_id="token")
    assert endpoint.notify_heartbeat() is True, "an early beat is accepted"
    clock = endpoint.setup_heartbeat_endpoint(heartbeat_seconds=30)
    started = time.monotonic()
    assert clock.clear_and_wait() is True
    # without the early beat this waits the whole 30 s: half of it, on any host, still tells the two apart
    assert time.monotonic() - started < 15, "the early beat counted: no 30 s wait"
    late = CallbackEndpoint(callback_id="other").setup_heartbeat_endpoint(heartbeat_seconds=1)
    assert late.clear_and_wait() is False, "without a beat the clock still runs out"


def test_state_machine_waits_for_the_scripts_callback(aws: EmbeddedAws, stack: DeployedStack) -> None:
    instance_id = launch(aws)  # not yet registered: AwaitAgent retries until it is
    request = {"instance_id": instance_id, "mode": "token", "sleep": "0", "exit_code": "0"}
    result = aws.wait_execution(aws.start_execution(stack.state_machine("AgentMachine"), request), timeout=30)
    assert result.succeeded, result
    out = result.output["run"]
    assert (out["mode"], out["literal"], out["container"]) == ("token", "{{ TaskToken }}", "none")
    assert out["endpoint"] == aws.endpoint
    assert Path(out["cwd"]).is_relative_to(instance_root(aws, instance_id))
    assert Path(out["python"]).parent == Path(sys.executable).parent  # the project's interpreter
    assert aws.invocations.of("AwaitAgentFunction")[-1].ok
    terminate(aws, instance_id)


def test_aborting_a_waiting_execution_is_delivered_as_aborted(aws: EmbeddedAws, stack: DeployedStack) -> None:
    instance_id = launch(aws)
    online(aws, instance_id)
    request = {"instance_id": instance_id, "mode": "token", "sleep": "30", "exit_code": "0"}
    arn = aws.start_execution(stack.state_machine("AgentMachine"), request)
    assert aws.agent is not None
    wait_for(lambda: [r.status for r in aws.agent.runs()] == ["InProgress"])  # type: ignore[union-attr]
    aws.client("stepfunctions").stop_execution(executionArn=arn, error="Stop", cause="test")
    assert aws.wait_execution(arn, timeout=10).status == "ABORTED"

    def aborted() -> list[Any]:
        return [c.event["detail"] for c in aws.invocations.of("RecorderFunction") if c.event["source"] == "aws.states"]

    wait_for(lambda: len(aborted()) == 1)
    (detail,) = aborted()
    assert (detail["status"], detail["executionArn"]) == ("ABORTED", arn)
    assert json.loads(detail["input"]) == request
    terminate(aws, instance_id)  # the reaper's job on AWS; here the test's
    wait_for(lambda: [r.status for r in aws.agent.runs()] == ["Cancelled"])  # type: ignore[union-attr]


def test_command_output_goes_to_s3_when_asked(aws: EmbeddedAws, stack: DeployedStack) -> None:
    instance_id = launch(aws)
    online(aws, instance_id)
    response = aws.client("ssm").send_command(
        DocumentName=stack.document_name(),
        InstanceIds=[instance_id],
        Parameters={"Mode": ["logged"]},
        OutputS3BucketName=stack.bucket(),
        OutputS3KeyPrefix="ssm/",
    )
    command_id = response["Command"]["CommandId"]
    assert finished(aws, command_id, instance_id)["Status"] == "Success"
    key = f"ssm/{command_id}/{instance_id}/awsrunShellScript/0.awsrunShellScript/stdout"
    body = aws.client("s3").get_object(Bucket=stack.bucket(), Key=key)["Body"].read().decode()
    assert "started mode=logged" in body
    terminate(aws, instance_id)


def test_what_a_killed_command_left_outside_its_group_is_killed_with_it(tmp_path: Path) -> None:
    """sccache daemonizes its server into a session of its own: the command's group dies without it. The
    instance's WF_WORK_ROOT finds it (an exact match: another instance's folder is spared)."""
    mine, other = tmp_path / "i-1" / "work", tmp_path / "i-10" / "work"
    procs = {
        root: subprocess.Popen(["sleep", "60"], env={**os.environ, "WF_WORK_ROOT": str(root)}, start_new_session=True)
        for root in (mine, other)
    }
    try:
        assert kill_left_behind(str(mine)) == [procs[mine].pid]
        assert procs[mine].wait(5) == -signal.SIGKILL
        assert procs[other].poll() is None, "another instance's process was killed"
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
