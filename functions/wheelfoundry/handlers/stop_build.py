"""StopBuild: stop a job's CodeBuild build (failure paths), forget its token, record its outcome.

The CodeBuild counterpart of Terminate: runs on the success path with ``stop: false`` (the build
ends by itself after its callback) and on every failure path with ``stop: true``.
"""

from __future__ import annotations

from typing import Any

from wheelfoundry.aws.codebuild import forget_token, job_builds, stop_builds
from wheelfoundry.aws.results import record_result
from wheelfoundry.handlers.runtime import Runtime, entrypoint, logger
from wheelfoundry.handlers.start_build import settings_of


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    state = event["state"]
    s3, codebuild, settings = rt.client("s3"), rt.client("codebuild"), settings_of(rt)
    builds = job_builds(s3, codebuild, settings, state["job"], state["execution"])
    stopped = stop_builds(codebuild, builds) if event.get("stop", True) else []
    forget_token(s3, settings.bucket, state["job"]["prefix"])
    if not event.get("record", True):  # a GPU test follows: the job's outcome is recorded after it
        return {"job_id": state["job"]["id"], "builds": builds, "stopped": stopped}
    result = record_result(state, s3, [], [])
    logger.info("build finished", extra={**result, "builds": builds, "stopped": stopped})
    return {**result, "builds": builds, "stopped": stopped}
