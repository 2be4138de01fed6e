"""Tags that tie an instance to its stack, execution and job: the reapers find instances by them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

STACK = "wheelfoundry:stack"
EXECUTION = "wheelfoundry:execution"
RUN = "wheelfoundry:run"
JOB = "wheelfoundry:job"
MARKET = "wheelfoundry:market"
EXPIRES_AT = "wheelfoundry:expires-at"
KEPT = "wheelfoundry:kept"
ATTEMPT = "wheelfoundry:attempt"  # "1" on a build relaunched after an OOM kill or a timeout; first launches none
PHASE = "wheelfoundry:phase"  # "gpu-test" on the GPU test's instance; build instances carry none
LIVE_STATES = ("pending", "running", "stopping", "stopped")


def tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def tags_of(instance: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}


def find_instances(ec2: Any, filters: dict[str, str], states: tuple[str, ...] = LIVE_STATES) -> list[dict[str, Any]]:
    """Instances whose tags match ``filters`` exactly, in one of ``states``."""
    query = [{"Name": f"tag:{k}", "Values": [v]} for k, v in filters.items()]
    query.append({"Name": "instance-state-name", "Values": list(states)})
    found = []
    for page in ec2.get_paginator("describe_instances").paginate(Filters=query):
        for reservation in page["Reservations"]:
            found.extend(reservation["Instances"])
    return found


def expired(instance: dict[str, Any], now: datetime) -> bool:
    stamp = tags_of(instance).get(EXPIRES_AT)
    if not stamp:
        return False
    try:
        return datetime.fromisoformat(stamp) <= now
    except ValueError:
        return True  # a tag we cannot read is not a reason to keep paying
