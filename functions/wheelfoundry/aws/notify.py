"""Tell a subscription's maintainer how a watcher-started run ended, through the stack's WatchTopic (SNS).

The watcher records each run it starts (``watch/runs/<execution>.json``: subscription, release, cells);
Report finds that record by the run's name and publishes one summary: built (cells with a wheel), published
(the wheels the channel got, signed), failed (each job or step, with its cause). The message carries the
subscription's name as the ``subscription`` attribute, so one maintainer's e-mail subscription can filter
to their package (`wheelfoundry subscribe --notify`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import ClientError

RUNS_PREFIX = "watch/runs/"
SUBJECT_MAX = 100  # SNS: a subject is at most 100 characters


def watch_record(s3: Any, bucket: str, run_id: str) -> dict[str, Any] | None:
    """The watcher's record of this run, None for a run the watcher did not start (names start ``w-``)."""
    if not run_id.startswith("w-"):
        return None
    try:
        record = json.loads(s3.get_object(Bucket=bucket, Key=f"{RUNS_PREFIX}{run_id}.json")["Body"].read())
    except (ClientError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def summary(record: Mapping[str, Any], report: Mapping[str, Any]) -> tuple[str, str]:
    """(subject, message) of a watcher-started run's outcome."""
    cells = len(record.get("cells") or [])
    missing = report.get("missing_cells") or []
    merged = (report.get("merge") or {}).get("wheels") or []
    built = len({c for w in merged for c in w.get("cells") or []}) if merged else max(cells - len(missing), 0)
    signed = (report.get("provenance") or {}).get("signed") or []
    outcome = "succeeded" if report.get("status") == "succeeded" else "FAILED"
    lines = [
        f"subscription {record.get('subscription')}: run {report.get('run_id')} {outcome}",
        f"why it ran: {record.get('reason')}",
        *(
            f"toolkit locked by the watcher for it: CUDA {t.get('cuda')} {t.get('platform')} (release "
            f"{t.get('release')}), sha256 {t.get('sha256')}, s3 key {t.get('key')}"
            for t in record.get("toolkits") or []
        ),
        f"built: {built} of {cells} cell(s)" + (f"; not built: {', '.join(map(str, missing))}" if missing else ""),
        f"published to channel {report.get('channel')}: {len(signed)} wheel(s)",
        *(f"  {wheel}" for wheel in signed),
    ]
    failed = report.get("failed") or []
    if failed:
        lines.append(f"failed: {len(failed)}")
        lines += [f"  {f.get('job_id')}: {f.get('error')}: {str(f.get('cause') or '')[:500]}" for f in failed]
    lines.append(f"details: wheelfoundry status {report.get('run_id')}")
    subject = f"WheelFoundry {record.get('subscription')}: {built}/{cells} cells built, {outcome}"
    return subject[:SUBJECT_MAX], "\n".join(lines)


def notify(s3: Any, sns: Callable[[], Any], topic_arn: str, run: Mapping[str, Any], report: Mapping[str, Any]) -> bool:
    """Publish the summary when the watcher started this run (and the stack has a topic); whether it did."""
    if not topic_arn:
        return False
    record = watch_record(s3, run["bucket"], run["id"])
    if record is None:
        return False
    subject, message = summary(record, report)
    attributes = {"subscription": {"DataType": "String", "StringValue": str(record.get("subscription"))}}
    sns().publish(TopicArn=topic_arn, Subject=subject, Message=message, MessageAttributes=attributes)
    return True
