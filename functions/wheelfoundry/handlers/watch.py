"""Watch: one tick of the watcher (schedule WatchSchedule): start a run per (subscription, release) whose cells
the channel lacks; ``{"dry_run": true}`` reads and plans, starts nothing and writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from wheelfoundry.handlers.runtime import Runtime, entrypoint, logger, metrics


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    from wheelfoundry.aws.watch import Sources, WatchSettings, run_tick, urllib_fetch
    from wheelfoundry.config import load_config
    from wheelfoundry.planning.jobs import StackContext

    bucket = rt.var("WF_BUCKET")
    guardrails = (
        int(rt.var("WF_MAX_JOBS_PER_RUN", "24")),
        float(rt.var("WF_MAX_INSTANCE_HOURS_PER_RUN", "250")),
        int(rt.var("WF_MAX_CONCURRENT_JOBS", "10")),
    )
    settings = WatchSettings(
        bucket=bucket,
        state_machine_arn=rt.var("WF_STATE_MACHINE_ARN"),
        config=load_config().with_guardrails(*guardrails),
        context=StackContext(bucket, rt.region, rt.var("WF_ECR_REPOSITORY", "")),
        sources=Sources(
            rt.var("WF_UPSTREAM_PYPI_URL", Sources.pypi), rt.var("WF_UPSTREAM_PYTORCH_URL", Sources.pytorch)
        ),
        max_starts=int(rt.var("WF_WATCH_MAX_RUNS_PER_TICK", "4")),
        dry_run=event.get("dry_run") is True,
        toolkit_approval="manual" if rt.var("WF_TOOLKIT_APPROVAL", "auto") == "manual" else "auto",
    )
    record = run_tick(rt.client("s3"), rt.client("stepfunctions"), urllib_fetch, settings, datetime.now(UTC))
    started = [r for r in record["runs"] if r.get("status") == "started"]
    metrics.add_metric(name="WatchRunsStarted", unit="Count", value=len(started))
    logger.info("tick", extra={"started": [r["name"] for r in started], "problems": record["problems"]})
    return record
