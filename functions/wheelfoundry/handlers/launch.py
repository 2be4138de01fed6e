"""Launch: start the job's instance (idempotent: a retry returns the instance already started)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from wheelfoundry.aws.instances import LaunchSettings, launch
from wheelfoundry.handlers.runtime import Runtime, entrypoint, logger, metrics


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    settings = LaunchSettings(
        stack=rt.var("WF_STACK_NAME"),
        launch_templates={
            "x86_64": rt.var("WF_LAUNCH_TEMPLATE_X86_64"),
            "aarch64": rt.var("WF_LAUNCH_TEMPLATE_AARCH64"),
        },
        ami_parameters={
            "x86_64": rt.var("WF_AMI_PARAMETER_X86_64"),
            "aarch64": rt.var("WF_AMI_PARAMETER_AARCH64"),
            "gpu": rt.var("WF_GPU_AMI_PARAMETER", ""),
        },
        subnets=tuple(s for s in rt.var("WF_SUBNET_IDS", "").split(",") if s),
        extension_profile=rt.var("WF_EXTENSION_INSTANCE_PROFILE_ARN", ""),
        bucket=rt.var("WF_BUCKET", ""),
    )
    clients = rt.client("ec2"), rt.client("ssm"), rt.client("stepfunctions")
    result = launch(event, *clients, settings, datetime.now(UTC), rt.client("s3"))
    if not result["reused"]:
        metrics.add_metric(name="InstancesLaunched", unit="Count", value=1)
    logger.info("launched", extra={"job": event["job"]["id"], **result})
    return result
