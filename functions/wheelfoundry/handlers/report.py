"""Report: write runs/<run-id>/report.json; tell a watcher-started run's subscription how it ended (SNS);
fail the execution with JobsFailed if any job failed."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from wheelfoundry.aws.notify import notify
from wheelfoundry.aws.report import report
from wheelfoundry.handlers.runtime import Runtime, entrypoint, logger


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    s3, topic = rt.client("s3"), rt.var("WF_WATCH_TOPIC_ARN", "")

    def tell(body: dict[str, Any]) -> None:
        try:
            notify(s3, lambda: rt.client("sns"), topic, event["run"], body)
        except (ClientError, BotoCoreError) as exc:  # the run's outcome stands; the notice is best effort
            logger.warning("notification not sent", extra={"run": event["run"]["id"], "error": str(exc)})

    public = (rt.var("WF_PUBLIC_INDEX_URL", ""), rt.var("WF_PUBLIC_CHANNELS", ""))
    return report(event, s3, tell, *public)
