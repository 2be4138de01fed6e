"""Callback: fail a Build task token when SSM or EC2 reports what the runner cannot."""

from __future__ import annotations

from typing import Any

from wheelfoundry.aws.callback import on_event
from wheelfoundry.handlers.runtime import Runtime, entrypoint, logger


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    result = on_event(event, rt.client("ec2"), rt.client("ssm"), rt.client("stepfunctions"), rt.var("WF_STACK_NAME"))
    logger.info("callback", extra=result)
    return result
