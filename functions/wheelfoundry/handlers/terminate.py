"""Terminate: end every instance of the job (unless kept for debugging) and record its outcome.

Runs on the success path and on every failure path of a Map iteration.
"""

from __future__ import annotations

from typing import Any

from wheelfoundry.aws import tags as T
from wheelfoundry.aws.instances import job_instances, terminate
from wheelfoundry.aws.results import record_result
from wheelfoundry.handlers.runtime import Runtime, entrypoint, logger


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    state = event["state"]
    ec2 = rt.client("ec2")
    ids = job_instances(ec2, rt.var("WF_STACK_NAME"), state["execution"], state["job"]["id"])
    if event.get("terminate", True):
        terminated, kept = terminate(ec2, ids), []
    else:
        terminated, kept = [], ids
        if kept:
            ec2.create_tags(Resources=kept, Tags=[{"Key": T.KEPT, "Value": "true"}])
    if not event.get("record", True):  # spot relaunch: the job goes on
        return {"job_id": state["job"]["id"], "terminated": terminated}
    result = record_result(state, rt.client("s3"), terminated, kept)
    logger.info("job finished", extra={**result, "terminated": terminated, "kept": kept})
    return result
