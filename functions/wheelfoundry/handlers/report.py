"""Report: write runs/<run-id>/report.json; fail the execution with JobsFailed if any job failed."""

from __future__ import annotations

from typing import Any

from wheelfoundry.aws.report import report
from wheelfoundry.handlers.runtime import Runtime, entrypoint


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    public = (rt.var("WF_PUBLIC_INDEX_URL", ""), rt.var("WF_PUBLIC_CHANNELS", ""))
    return report(event, rt.client("s3"), *public)
