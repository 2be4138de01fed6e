"""Reaper: terminate instances of failed/aborted executions, and any instance past its deadline;
stop CodeBuild builds (job builds and runtime image builds) of failed/aborted executions, and any
whose execution no longer runs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from wheelfoundry.aws.codebuild import reap_builds
from wheelfoundry.aws.instances import reap
from wheelfoundry.handlers.runtime import Runtime, entrypoint, logger, metrics
from wheelfoundry.handlers.start_build import settings_of


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    result = reap(event, rt.client("ec2"), rt.var("WF_STACK_NAME"), datetime.now(UTC))
    if result["terminated"]:
        metrics.add_metric(name="InstancesReaped", unit="Count", value=len(result["terminated"]))
        logger.warning("reaped instances", extra=result)
    projects = settings_of(rt, images=True).stack_projects  # the framework projects and the runtime image project
    builds = reap_builds(event, rt.client("codebuild"), rt.client("stepfunctions"), projects)
    if builds["stopped"]:
        metrics.add_metric(name="BuildsReaped", unit="Count", value=len(builds["stopped"]))
        logger.warning("stopped builds", extra=builds)
    return {**result, **builds}
