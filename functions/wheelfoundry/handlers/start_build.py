"""StartBuild: store the Build state's task token in S3 and start the job's CodeBuild build.

Invoked with ``lambda:invoke.waitForTaskToken``: the state waits for the runner's callback (or the
CodeBuild state-change rule's), not for this function's result.
"""

from __future__ import annotations

from typing import Any

from wheelfoundry.aws.codebuild import BuildSettings, start
from wheelfoundry.handlers.runtime import Runtime, entrypoint, logger, metrics


def settings_of(rt: Runtime, images: bool = False) -> BuildSettings:
    """``images``: the backstops (Callback, Reaper) cover the runtime image project too, and must know it."""
    projects = {"x86_64": rt.var("WF_CODEBUILD_PROJECT_X86_64"), "aarch64": rt.var("WF_CODEBUILD_PROJECT_AARCH64")}
    image_project = rt.var("WF_IMAGE_PROJECT") if images else ""
    return BuildSettings(rt.var("WF_BUCKET"), projects, rt.var("WF_CODEBUILD_EXTENSION_ROLE", ""), image_project)


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    result = start(event, rt.client("s3"), rt.client("codebuild"), settings_of(rt))
    if not result["reused"]:
        metrics.add_metric(name="BuildsStarted", unit="Count", value=1)
    logger.info("build started", extra={"job": event["job"]["id"], **result})  # never the event: it holds the token
    return result
