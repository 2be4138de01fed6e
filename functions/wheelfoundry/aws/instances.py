"""Launch, wait for and terminate build instances; everything they launch can be found by tags."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from wheelfoundry.aws import admission
from wheelfoundry.aws import tags as T
from wheelfoundry.errors import AgentNotReady, CapacityUnavailable, InstanceLost, LaunchFailed

# Capacity errors are worth another try (or on-demand); quota errors wait (admission.py); anything else
# needs a person.
CAPACITY_ERRORS = {
    "InsufficientInstanceCapacity",
    "SpotMaxPriceTooLow",
    "InsufficientCapacity",
    "RequestLimitExceeded",
}
WATCHDOG_MARGIN_MINUTES = 30


@dataclass(frozen=True)
class LaunchSettings:
    stack: str
    launch_templates: dict[str, str]  # platform -> launch template id
    ami_parameters: dict[str, str]  # platform -> public SSM parameter naming the AMI
    subnets: tuple[str, ...]
    extension_profile: str = ""  # instance profile ARN of the extension (untrusted) class
    bucket: str = ""  # where a job waiting for vCPU quota records the numbers (admission.WAITING)


def client_token(execution: str, job_id: str, market: str, phase: str = "", attempt: int = 0) -> str:
    """Same execution, job, market, phase and attempt -> same token: a retried Launch gets the same instance;
    a relaunch (``attempt`` 1: after an OOM kill or a timeout) a new one."""
    key = f"{execution}|{job_id}|{market}" + (f"|{phase}" if phase else "") + (f"|attempt{attempt}" if attempt else "")
    return hashlib.sha256(key.encode()).hexdigest()[:64]


def _what(job: dict[str, Any], phase: str) -> tuple[str, bool, int, str, int]:
    """(instance type, spot, seconds it may run, AMI key, vCPUs): the build's, or its GPU test's."""
    if phase == "gpu-test":
        test = job.get("gpu_test") or {}
        if not test:
            raise LaunchFailed(f"{job['id']} has no GPU test to launch")
        return test["instance_type"], bool(test["spot"]), int(test["max_seconds"]), "gpu", int(test.get("vcpus", 0))
    if phase:
        raise LaunchFailed(f"unknown launch phase {phase!r}")
    return job["instance_type"], bool(job["spot"]), int(job["max_seconds"]), job["platform"], int(job.get("vcpus", 0))


def user_data(max_seconds: int) -> str:
    """The instance guards itself: it powers off (and so terminates) after the job's deadline.

    Plain text: boto3 base64-encodes RunInstances' UserData itself.
    """
    minutes = max_seconds // 60 + WATCHDOG_MARGIN_MINUTES
    script = (
        "#!/bin/bash\n"
        "# WheelFoundry watchdog: InstanceInitiatedShutdownBehavior=terminate turns this into a termination.\n"
        f"shutdown -h +{minutes} 'WheelFoundry build deadline reached'\n"
    )
    return script


def _execution_ended(sfn: Any, execution: str) -> str | None:
    """The execution's status when it is no longer running (stopped, timed out), else None."""
    status = str(sfn.describe_execution(executionArn=execution)["status"])
    return None if status == "RUNNING" else status


def launch(
    event: dict[str, Any], ec2: Any, ssm: Any, sfn: Any, settings: LaunchSettings, now: datetime, s3: Any = None
) -> dict[str, Any]:
    job, run, execution = event["job"], event["run"], event["execution"]
    phase = event.get("phase", "")
    instance_type, spot, max_seconds, ami, vcpus = _what(job, phase)
    # An abort does not stop a Launch already in flight, and the abort's reaper has run by then.
    ended = _execution_ended(sfn, execution)
    if ended:
        raise LaunchFailed(f"not launching {job['id']}: the execution is {ended}")
    market = "spot" if spot else "ondemand"
    identity = {T.STACK: settings.stack, T.EXECUTION: execution, T.JOB: job["id"], T.MARKET: market}
    if phase:
        identity[T.PHASE] = phase
    attempt = int(job.get("attempt") or 0) if not phase else 0
    if attempt:
        identity[T.ATTEMPT] = str(attempt)
    existing = [
        i
        for i in T.find_instances(ec2, identity, states=("pending", "running"))
        if T.tags_of(i).get(T.PHASE, "") == phase
        and T.tags_of(i).get(T.ATTEMPT, "") == (str(attempt) if attempt else "")
    ]
    if existing:  # a retry after RunInstances succeeded but the Lambda did not return
        return {"instance_id": existing[0]["InstanceId"], "market": market, "reused": True}
    if not settings.ami_parameters.get(ami):
        raise LaunchFailed(f"no AMI parameter for {ami} instances in this stack")
    image = ssm.get_parameter(Name=settings.ami_parameters[ami])["Parameter"]["Value"]
    expires = now + timedelta(seconds=max_seconds, minutes=WATCHDOG_MARGIN_MINUTES)
    tags = {
        **identity,
        T.RUN: run["id"],
        T.EXPIRES_AT: expires.isoformat(timespec="seconds"),
        "Name": f"wheelfoundry-{job['id']}{'-' + phase if phase else ''}"[:255],
    }
    params: dict[str, Any] = {
        "LaunchTemplate": {"LaunchTemplateId": settings.launch_templates[job["platform"]], "Version": "$Latest"},
        "ImageId": image,
        "InstanceType": instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "ClientToken": client_token(execution, job["id"], market, phase, attempt),
        "UserData": user_data(max_seconds),
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": T.tag_list(tags)},
            {"ResourceType": "volume", "Tags": T.tag_list(tags)},
        ],
    }
    if job.get("trust") == "extension" and settings.extension_profile:
        # Untrusted builds: the launch template's (framework) profile is replaced by the extension class's.
        params["IamInstanceProfile"] = {"Arn": settings.extension_profile}
    if spot:
        params["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
        }
    if settings.subnets:
        index = int(hashlib.sha256(job["id"].encode()).hexdigest(), 16) % len(settings.subnets)
        params["SubnetId"] = settings.subnets[index]
    try:
        response = ec2.run_instances(**params)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in admission.QUOTA_ERRORS:
            error = admission.quota_error(code, event, instance_type, spot, vcpus, ec2, s3, settings.bucket, now)
            raise error from exc
        if code in CAPACITY_ERRORS:
            raise CapacityUnavailable(f"{instance_type} ({market}): {code}") from exc
        raise LaunchFailed(f"RunInstances for {job['id']} failed: {code}: {exc}") from exc
    instance_id = response["Instances"][0]["InstanceId"]
    ended = _execution_ended(sfn, execution)
    if ended:  # stopped while RunInstances ran: nobody is left to terminate this instance but us
        terminate(ec2, [instance_id])
        raise LaunchFailed(f"terminated {instance_id} of {job['id']}: the execution is {ended}")
    return {"instance_id": instance_id, "market": market, "image_id": image, "reused": False}


def await_agent(instance_id: str, ec2: Any, ssm: Any) -> dict[str, Any]:
    """Raise AgentNotReady until SSM can reach the instance (the ASL retries with backoff)."""
    reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    instance = reservations[0]["Instances"][0] if reservations else {}
    state = instance.get("State", {}).get("Name", "missing")
    if state not in ("pending", "running"):
        reason = instance.get("StateReason", {}).get("Message", "")
        raise InstanceLost(f"{instance_id} is {state} before its build started {reason}".strip())
    found = ssm.describe_instance_information(Filters=[{"Key": "InstanceIds", "Values": [instance_id]}])
    info = found.get("InstanceInformationList", [])
    if not info or info[0].get("PingStatus") != "Online":
        raise AgentNotReady(f"the SSM agent on {instance_id} ({state}) has not registered yet")
    return {"instance_id": instance_id, "ping": info[0]["PingStatus"]}


def job_instances(ec2: Any, stack: str, execution: str, job_id: str) -> list[str]:
    found = T.find_instances(ec2, {T.STACK: stack, T.EXECUTION: execution, T.JOB: job_id})
    return [i["InstanceId"] for i in found]


def terminate(ec2: Any, instance_ids: list[str]) -> list[str]:
    if instance_ids:
        ec2.terminate_instances(InstanceIds=instance_ids)
    return instance_ids


def reap(event: dict[str, Any], ec2: Any, stack: str, now: datetime) -> dict[str, Any]:
    """Layer 2 (execution failed, timed out, aborted) and layer 3 (deadline passed) of always-terminate."""
    detail = event.get("detail") or {}
    if event.get("source") == "aws.states":
        status = detail.get("status", "")
        found = T.find_instances(ec2, {T.STACK: stack, T.EXECUTION: detail.get("executionArn", "")})
        # keep_on_failure instances survive the failure they were kept to debug, never an abort.
        chosen = [i for i in found if not (status == "FAILED" and T.tags_of(i).get(T.KEPT) == "true")]
        reason = f"execution {status}"
    else:
        found = T.find_instances(ec2, {T.STACK: stack})
        chosen = [i for i in found if T.expired(i, now)]
        reason = "deadline passed"
    ids = terminate(ec2, [i["InstanceId"] for i in chosen])
    return {"terminated": ids, "reason": reason, "seen": len(found)}
