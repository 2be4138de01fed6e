"""Collect: check the manifest against the uploaded wheels and publish them to the channel."""

from __future__ import annotations

from typing import Any

from wheelfoundry.aws.results import collect
from wheelfoundry.handlers.runtime import Runtime, entrypoint, logger, metrics


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    result = collect(event, rt.client("s3"))
    metrics.add_metric(name="WheelsPublished", unit="Count", value=len(result["published"]))
    logger.info("collected", extra={"job": event["job"]["id"], **result})
    return result
