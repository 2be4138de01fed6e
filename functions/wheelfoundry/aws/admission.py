"""Waiting for EC2 vCPU quota: a launch refused because other instances hold the quota waits its turn.

RunInstances answers VcpuLimitExceeded (on-demand) or MaxSpotInstanceCountExceeded (spot) when the
account's running instances of the family already use the quota. Validate refused every plan with an
instance larger than its quota, so this is a matter of time: Launch raises VcpuQuotaWait, which the
ASL retries with backoff, until the job has waited the run's QuotaWaitSeconds since it entered the
launch state; then QuotaWaitTimedOut fails the job (nothing was launched). While it waits, the
numbers are in runs/<run>/jobs/<job>/waiting.json for `wheelfoundry status`.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from wheelfoundry.aws import tags as T
from wheelfoundry.config import load_config
from wheelfoundry.errors import QuotaWaitTimedOut, VcpuQuotaWait
from wheelfoundry.planning import quotas

QUOTA_ERRORS = frozenset({"VcpuLimitExceeded", "MaxSpotInstanceCountExceeded"})
WAITING = "waiting.json"


def _vcpus(instance: dict[str, Any]) -> int:
    """EC2's CpuOptions; else this project's table (config.toml) for the types it launches."""
    cpu = instance.get("CpuOptions") or {}
    if cpu.get("CoreCount"):
        return int(cpu["CoreCount"]) * int(cpu.get("ThreadsPerCore", 1))
    config, itype = load_config(), str(instance.get("InstanceType", ""))
    known = config.instance_types.get(itype) or config.gpu_types.get(itype)
    return int(known.vcpus) if known else 0


def in_use(ec2: Any, quota: quotas.Quota) -> int:
    """vCPUs of the account's pending and running instances that count against the quota (every stack's)."""
    total = 0
    for instance in T.find_instances(ec2, {}, states=("pending", "running")):
        spot = instance.get("InstanceLifecycle") == "spot"
        if quotas.quota_for(str(instance.get("InstanceType", "")), spot) == quota:
            total += _vcpus(instance)
    return total


def quota_error(
    code: str,
    event: dict[str, Any],
    instance_type: str,
    spot: bool,
    vcpus: int,
    ec2: Any,
    s3: Any,
    bucket: str,
    now: datetime,
) -> Exception:
    """VcpuQuotaWait (retry later) or QuotaWaitTimedOut (give up), with the numbers; records the wait."""
    job = event["job"]
    quota = quotas.quota_for(instance_type, spot)
    known = job.get("quota") or {}
    entered = datetime.fromisoformat(str(event.get("entered") or now.isoformat()))
    waited = max(0, int((now - entered).total_seconds()))
    limit = int(event.get("quota_wait") or 0)
    used = in_use(ec2, quota) if quota else None
    value = known.get("value") if quota and known.get("code") == quota.code else None
    where = f"{quota.name} ({quota.code})" if quota else "its vCPU quota"
    numbers = (
        f"{job['id']} needs {vcpus} vCPUs ({instance_type}, {'spot' if spot else 'on-demand'}); {where} is "
        f"{'unknown' if value is None else int(value)} vCPUs, {'?' if used is None else used} in use"
    )
    if waited >= limit:
        raise_it = f"gave up waiting for vCPU quota after {waited} s (QuotaWaitSeconds {limit}): {numbers}"
        if quota:
            raise_it += f"; nothing was launched. For more: {quotas.increase_command(quota.code, vcpus + (used or 0))}"
        return QuotaWaitTimedOut(raise_it + f" (EC2: {code})")
    line = f"waiting for vCPU quota: {numbers}; waited {waited} s of {limit} s (EC2: {code})"
    if s3 is not None and bucket and job.get("prefix"):
        record = {
            "line": line,
            "needs": vcpus,
            "in_use": used,
            "quota": {"code": quota.code, "name": quota.name, "value": value} if quota else None,
            "waited_seconds": waited,
            "limit_seconds": limit,
            "at": now.isoformat(timespec="seconds"),
        }
        s3.put_object(Bucket=bucket, Key=job["prefix"] + WAITING, Body=json.dumps(record, indent=2))
    return VcpuQuotaWait(line)
