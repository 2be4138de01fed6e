"""Merge: one wheel per (Python, platform) from every cell of a merged-layout extension run."""

from __future__ import annotations

from typing import Any

from wheelfoundry.aws.merging import merge_run
from wheelfoundry.handlers.runtime import Runtime, entrypoint, logger, metrics


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    result = merge_run(event, rt.client("s3"))
    metrics.add_metric(name="MergedWheelsPublished", unit="Count", value=len(result["published"]))
    metrics.add_metric(name="CellsMissing", unit="Count", value=len(result["missing_cells"]))
    logger.info("merged", extra={"run": event["run"]["id"], **{k: v for k, v in result.items() if k != "wheels"}})
    return result
