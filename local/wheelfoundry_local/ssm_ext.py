"""What moto's SSM lacks for the agent to be emulated: registration, DescribeInstanceInformation,
SendCommand validation and CancelCommand.

On AWS an instance becomes a managed instance some time after boot (the agent registers); until
then SendCommand fails with InvalidInstanceId and DescribeInstanceInformation does not list it.
SendCommand also validates the parameters against the document (unknown, missing, allowedPattern,
allowedValues). moto does none of that; this module adds it, so a state machine that sends too
early or with a bad parameter fails here as it would on AWS.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any

from ._moto import ACCOUNT_ID, Patches, ec2_backend, ssm_backend

FINAL = ("Success", "Failed", "TimedOut", "Cancelled")
_STDOUT_LIMIT, _STDERR_LIMIT = 24_000, 8_000  # what GetCommandInvocation returns on AWS
OnCommand = Callable[[str, Any], None]  # (region, moto Command) -> None
OnCancel = Callable[[str, str, list[str]], None]  # (region, command id, instance ids) -> None


def _ssm_error(code: str, message: str) -> Exception:
    from moto.ssm.exceptions import SSMException

    return SSMException(code, message)


class Registration:
    """Instances count as registered (PingStatus Online) `delay` seconds after launch while running."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    def online(self, region: str) -> list[Any]:
        now = dt.datetime.now(tz=dt.UTC).replace(tzinfo=None)  # moto's launch_time is naive UTC
        horizon = dt.timedelta(seconds=self.delay)
        return [
            i for i in ec2_backend(region).all_instances() if i.state == "running" and now - i.launch_time >= horizon
        ]

    def is_online(self, region: str, instance_id: str) -> bool:
        return any(i.id == instance_id for i in self.online(region))

    def describe(self, region: str, instance_ids: list[str] | None, ping: list[str] | None) -> list[dict[str, Any]]:
        if ping is not None and "Online" not in ping:
            return []  # only Online instances are ever listed here
        now = dt.datetime.now(tz=dt.UTC)
        return [
            {
                "InstanceId": i.id,
                "PingStatus": "Online",
                "LastPingDateTime": now,
                "AgentVersion": "3.3.0.0",
                "IsLatestVersion": True,
                "PlatformType": "Linux",
                "PlatformName": "Amazon Linux",
                "PlatformVersion": "2023",
                "ResourceType": "EC2Instance",
                "IPAddress": i.private_ip or "",
                "ComputerName": f"{i.id}.ec2.internal",
                "RegistrationDate": i.launch_time.replace(tzinfo=dt.UTC) + dt.timedelta(seconds=self.delay),
            }
            for i in self.online(region)
            if instance_ids is None or i.id in instance_ids
        ]


def document_parameters(region: str, document_name: str) -> tuple[Any, dict[str, Any]]:
    """(moto document, its `parameters` declaration); InvalidDocument when there is none."""
    try:
        document = ssm_backend(region)._get_documents(document_name).get_default_version()
    except Exception:
        raise _ssm_error("InvalidDocument", f"Document {document_name} does not exist") from None
    return document, dict(document.content_json.get("parameters") or {})


def validate_parameters(declared: dict[str, Any], given: dict[str, list[str]]) -> None:
    problems = [f"{name} is not a parameter of the document" for name in given if name not in declared]
    for name, spec in declared.items():
        values = given.get(name)
        if values is None:
            if "default" not in spec:
                problems.append(f"{name} is required")
            continue
        for value in values:
            pattern = spec.get("allowedPattern")
            if pattern is not None and re.fullmatch(pattern, str(value), flags=re.DOTALL) is None:
                problems.append(f"{name}: {str(value)[:80]!r} does not match allowedPattern {pattern}")
            allowed = spec.get("allowedValues")
            if allowed is not None and value not in allowed:
                problems.append(f"{name}: {value!r} is not one of {allowed}")
    if problems:
        raise _ssm_error("InvalidParameters", "; ".join(problems))


def record_status(
    command: Any, instance_id: str, status: str, started: dt.datetime, exit_code: int | None, stdout: str, stderr: str
) -> None:
    """Write an invocation's status into moto's command, and the command's aggregate status."""
    now = dt.datetime.now(tz=dt.UTC)
    for invocation in command.invocations:
        if invocation["InstanceId"] != instance_id:
            continue
        invocation.update(Status=status, StatusDetails=status, ExecutionStartDateTime=started.isoformat())
        if status in FINAL:
            invocation.update(
                ResponseCode=exit_code if exit_code is not None and status in ("Success", "Failed") else -1,
                ExecutionEndDateTime=now.isoformat(),
                ExecutionElapsedTime=f"PT{(now - started).total_seconds():.3f}S",
                StandardOutputContent=stdout[:_STDOUT_LIMIT],
                StandardErrorContent=stderr[:_STDERR_LIMIT],
            )
    done = [i["Status"] for i in command.invocations if i["Status"] in FINAL]
    command.completed_count = len(done)
    command.error_count = sum(s in ("Failed", "TimedOut") for s in done)
    if len(done) < len(command.invocations):
        command.status = command.status_details = "InProgress"
    else:
        worst = next((s for s in ("Failed", "TimedOut", "Cancelled") if s in done), "Success")
        command.status = command.status_details = worst


def install(patches: Patches, registration: Registration, on_command: OnCommand, on_cancel: OnCancel) -> None:
    from moto.core.responses import ActionResult, EmptyResult
    from moto.ssm.models import SimpleSystemManagerBackend
    from moto.ssm.responses import SimpleSystemManagerResponse

    def wrap_send(original: Callable[..., Any]) -> Callable[..., Any]:
        def send_command(backend: Any, *args: Any, **kwargs: Any) -> Any:
            document_name = kwargs.get("document_name")
            _, declared = document_parameters(backend.region_name, str(document_name))
            validate_parameters(declared, kwargs.get("parameters") or {})
            offline = [
                i for i in kwargs.get("instance_ids") or [] if not registration.is_online(backend.region_name, i)
            ]
            if offline:
                raise _ssm_error(
                    "InvalidInstanceId", f"Instances {offline} not in a valid state for account {ACCOUNT_ID}"
                )
            command = original(backend, *args, **kwargs)
            # moto reports Success at once; AWS says Pending until the agent picks the command up.
            command.status = "Pending"
            command.status_details = "Pending"
            command.completed_count = 0
            for invocation in command.invocations:
                invocation.update(Status="Pending", StatusDetails="Pending", ResponseCode=-1, ExecutionEndDateTime="")
            on_command(backend.region_name, command)
            return command

        return send_command

    patches.wrap(SimpleSystemManagerBackend, "send_command", wrap_send)

    # moto resolves Targets through EC2 filters; with no Targets at all its empty filter matches
    # every instance in the region, so a command meant for one instance ran on all of them.
    from moto.ssm.models import Command

    def wrap_targets(original: Callable[..., list[str]]) -> Callable[..., list[str]]:
        def from_targets(command: Any) -> list[str]:
            return original(command) if command.targets else []

        return from_targets

    patches.wrap(Command, "_get_instance_ids_from_targets", wrap_targets)

    def describe_instance_information(self: Any) -> Any:
        # Both filter spellings of the API: InstanceInformationFilterList (key/valueSet) and Filters.
        filters: dict[str, list[str]] = {}
        for f in self._get_param("InstanceInformationFilterList") or []:
            filters[f["key"]] = f["valueSet"]
        for f in self._get_param("Filters") or []:
            filters[f["Key"]] = f["Values"]
        ids, ping = filters.get("InstanceIds"), filters.get("PingStatus")
        return ActionResult({"InstanceInformationList": registration.describe(self.region, ids, ping)})

    def cancel_command(self: Any) -> Any:
        command_id = self._get_param("CommandId")
        backend = ssm_backend(self.region)
        command = backend.get_command_by_id(command_id)  # InvalidCommandId if unknown
        on_cancel(self.region, command_id, self._get_param("InstanceIds") or list(command.instance_ids))
        return EmptyResult()

    patches.set(SimpleSystemManagerResponse, "describe_instance_information", describe_instance_information)
    patches.set(SimpleSystemManagerResponse, "cancel_command", cancel_command)
