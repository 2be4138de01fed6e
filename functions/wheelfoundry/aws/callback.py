"""Backstops for the Build task token: SSM command failures, spot interruption warnings and
CodeBuild builds that ended FAILED / STOPPED / TIMED_OUT / FAULT.

The runner normally calls back itself. These fire when it cannot: the command failed before the
runner started, timed out, was cancelled, the spot instance is about to be reclaimed, or the
CodeBuild build ended before the runner could report (install phase, build timeout, StopBuild).
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from wheelfoundry.aws import tags as T
from wheelfoundry.aws.codebuild import BuildSettings, on_build_state

GONE = {"TaskTimedOut", "TaskDoesNotExist", "InvalidToken"}  # the task already ended
CAUSE_LIMIT = 32000


def _token(command: dict[str, Any]) -> str | None:
    values = command.get("Parameters", {}).get("TaskToken") or []
    return values[0] if values else None


def _fail(sfn: Any, token: str, error: str, cause: str) -> bool:
    try:
        sfn.send_task_failure(taskToken=token, error=error, cause=cause[:CAUSE_LIMIT])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in GONE:
            return False
        raise
    return True


def _output_tail(ssm: Any, command_id: str, instance_id: str) -> str:
    try:
        inv = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
    except ClientError:
        return ""
    text = (inv.get("StandardErrorContent") or "") + (inv.get("StandardOutputContent") or "")
    return text[-4000:]


def on_command_status(detail: dict[str, Any], ssm: Any, sfn: Any) -> dict[str, Any]:
    command_id, instance_id = detail["command-id"], detail.get("instance-id", "")
    status = detail.get("status", "")
    commands = ssm.list_commands(CommandId=command_id).get("Commands", [])
    token = _token(commands[0]) if commands else None
    if token is None:
        return {"action": "ignored", "reason": f"command {command_id} carries no task token"}
    cause = f"SSM command {command_id} on {instance_id} ended {status}. {_output_tail(ssm, command_id, instance_id)}"
    # TimedOut: the command's ExecutionTimeout (the job's max_seconds) passed: a relaunch resumes from the cache
    error = "BuildTimedOut" if status == "TimedOut" else "BuildCommandFailed"
    delivered = _fail(sfn, token, error, cause)
    return {"action": "failed-task" if delivered else "already-ended", "command": command_id, "status": status}


def on_spot_warning(detail: dict[str, Any], ec2: Any, ssm: Any, sfn: Any, stack: str) -> dict[str, Any]:
    instance_id = detail["instance-id"]
    found = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    instance = found[0]["Instances"][0] if found else {}
    if T.tags_of(instance).get(T.STACK) != stack:
        return {"action": "ignored", "reason": f"{instance_id} is not this stack's"}
    commands = ssm.list_commands(InstanceId=instance_id).get("Commands", [])
    active = [c for c in commands if c.get("Status") in ("Pending", "InProgress") and _token(c)]
    failed = [c["CommandId"] for c in active if _fail(sfn, _token(c) or "", "SpotInterrupted", f"{instance_id}")]
    return {"action": "failed-task" if failed else "no-active-build", "commands": failed}


def on_event(
    event: dict[str, Any],
    ec2: Any,
    ssm: Any,
    sfn: Any,
    stack: str,
    builds: tuple[Any, Any, BuildSettings] | None = None,  # (codebuild, s3, settings)
) -> dict[str, Any]:
    kind = event.get("detail-type", "")
    detail = event.get("detail") or {}
    if kind == "CodeBuild Build State Change" and builds is not None:
        codebuild, s3, settings = builds
        return on_build_state(detail, codebuild, s3, sfn, settings)
    if kind == "EC2 Command Invocation Status-change Notification":
        return on_command_status(detail, ssm, sfn)
    if kind == "EC2 Spot Instance Interruption Warning":
        return on_spot_warning(detail, ec2, ssm, sfn, stack)
    return {"action": "ignored", "reason": f"unexpected event {kind!r}"}
