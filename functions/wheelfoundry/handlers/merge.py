"""Merge: stage what an extension run will publish (merged or per-cell) for its test jobs.

Called again after Attest's MergedWheelFailed (``fallback`` in the event): the cell wheels instead.
"""

from __future__ import annotations

from typing import Any

from wheelfoundry.aws.fallback import restage
from wheelfoundry.aws.merging import stage_run
from wheelfoundry.handlers.runtime import Runtime, entrypoint, logger, metrics


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    s3 = rt.client("s3")
    result = restage(event, s3) if event.get("fallback") else stage_run(event, s3)
    metrics.add_metric(name="WheelsStaged", unit="Count", value=len(result["wheels"]))
    metrics.add_metric(name="CellsMissing", unit="Count", value=len(result["missing_cells"]))
    logger.info("staged", extra={"run": event["run"]["id"], **{k: v for k, v in result.items() if k != "wheels"}})
    return result
