"""Callback: fail a Build task token when SSM, EC2 or CodeBuild reports what the runner cannot."""

from __future__ import annotations

from typing import Any

from wheelfoundry.aws.callback import on_event
from wheelfoundry.handlers.runtime import Runtime, entrypoint, logger
from wheelfoundry.handlers.start_build import settings_of


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    builds = None
    if event.get("source") == "aws.codebuild":
        builds = (rt.client("codebuild"), rt.client("s3"), settings_of(rt, images=True))
    ec2, ssm, sfn = rt.client("ec2"), rt.client("ssm"), rt.client("stepfunctions")
    result = on_event(event, ec2, ssm, sfn, rt.var("WF_STACK_NAME"), builds)
    logger.info("callback", extra=result)
    return result
