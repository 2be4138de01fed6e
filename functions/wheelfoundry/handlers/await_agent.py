"""AwaitAgent: succeed once SSM can reach the instance; AgentNotReady makes the ASL retry."""

from __future__ import annotations

from typing import Any

from wheelfoundry.aws.instances import await_agent
from wheelfoundry.handlers.runtime import Runtime, entrypoint


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    return await_agent(event["instance_id"], rt.client("ec2"), rt.client("ssm"))
