"""Reaper: terminate instances of failed/aborted executions, and any instance past its deadline."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from wheelfoundry.aws.instances import reap
from wheelfoundry.handlers.runtime import Runtime, entrypoint, logger, metrics


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    result = reap(event, rt.client("ec2"), rt.var("WF_STACK_NAME"), datetime.now(UTC))
    if result["terminated"]:
        metrics.add_metric(name="InstancesReaped", unit="Count", value=len(result["terminated"]))
        logger.warning("reaped instances", extra=result)
    return result
