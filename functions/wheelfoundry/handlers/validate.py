"""Validate: check the request, plan the jobs, store their contracts. Launches nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from wheelfoundry.handlers.runtime import Runtime, entrypoint, logger, metrics


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    # The planner, the catalog and jsonschema (~170 ms of imports) load at the first call, not at
    # the function's init: bench/lambda_bundle.py reports both figures.
    from wheelfoundry.aws.runs import ValidateSettings, validate

    settings = ValidateSettings(
        bucket=rt.var("WF_BUCKET"),
        region=rt.region,
        ecr_repository=rt.var("WF_ECR_REPOSITORY", ""),
        max_jobs=int(rt.var("WF_MAX_JOBS_PER_RUN", "24")),
        max_instance_hours=float(rt.var("WF_MAX_INSTANCE_HOURS_PER_RUN", "250")),
        heartbeat_seconds=int(rt.var("WF_BUILD_HEARTBEAT_SECONDS", "900")),
        max_concurrency=int(rt.var("WF_MAX_CONCURRENT_JOBS", "10")),
        runtime_repository=rt.var("WF_RUNTIME_REPOSITORY", ""),
        framework_job_role=rt.var("WF_FRAMEWORK_JOB_ROLE_ARN", ""),
        extension_job_role=rt.var("WF_EXTENSION_JOB_ROLE_ARN", ""),
        source_bucket=rt.var("WF_EXTENSION_SOURCE_BUCKET", ""),
        container_builds=rt.var("WF_CONTAINER", "docker") != "none",
        quota_wait_seconds=int(rt.var("WF_QUOTA_WAIT_SECONDS", "21600")),
        publish_secret=bool(rt.var("WF_PUBLISH_SECRET_ARN", "")),
        publish_codeartifact=rt.var("WF_PUBLISH_CODEARTIFACT", ""),
    )
    today = datetime.now(UTC).date()
    result = validate(event, rt.client("s3"), settings, today, rt.client("service-quotas"))
    metrics.add_metric(name="JobsPlanned", unit="Count", value=len(result["jobs"]))
    logger.info("planned", extra={"run": result["run"]["id"], "jobs": [j["id"] for j in result["jobs"]]})
    return result
