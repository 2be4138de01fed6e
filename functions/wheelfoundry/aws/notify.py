"""Tell a subscription's maintainer how a watcher-started run ended, through the stack's WatchTopic (SNS).

The watcher records each run it starts (``watch/runs/<execution>.json``: subscription, release, cells);
Report finds that record by the run's name and publishes one summary: built (cells with a wheel), published
(the wheels the channel got, signed), failed (each job or step, with its cause). The message carries the
subscription's name as the ``subscription`` attribute, so one maintainer's e-mail subscription can filter
to their package (`wheelfoundry subscribe --notify`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from datetime import datetime
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


def cell_id(cell: Mapping[str, Any]) -> str:
    """A run record's cell as the run's jobs name it (planning.cells.cells_for): torch2.15.0-cp312-cpu-x86_64."""
    from wheelfoundry.request.targets import target_id  # here: the Report handler's cold import stays catalog-free

    cuda = cell.get("cuda")
    target = {"platform": cell.get("platform"), "accelerator": "cpu" if cuda in (None, "cpu") else "cuda", "cuda": cuda}
    return f"torch{cell.get('torch')}-cp{str(cell.get('python')).replace('.', '')}-{target_id(target)}"


def release_day(record: Mapping[str, Any], report: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """How a watcher-started run served its release (issue 64 item 4), for report.json and the notification:
    the tick that started it (the run record's ``started_at``: the tick's own clock) to now, the Report step, which
    runs after the last wheel was published and signed; the toolkits the tick locked for it; what each cell got."""
    published = {c for w in (report.get("merge") or {}).get("wheels") or [] for c in w.get("cells") or []}
    missing = set(report.get("missing_cells") or [])
    cells = {}
    for cell in record.get("cells") or []:
        key = cell_id(cell)
        cells[key] = "published" if key in published else "not built" if key in missing else "built, not published"
    out: dict[str, Any] = {"tick_at": record.get("started_at"), "reported_at": now.isoformat(), "minutes": None}
    with contextlib.suppress(TypeError, ValueError):  # a record without the tick's time: unknown, never guessed
        out["minutes"] = round((now - datetime.fromisoformat(str(record.get("started_at")))).total_seconds() / 60, 1)
    toolkits = [
        {k: t.get(k) for k in ("cuda", "platform", "release", "key", "sha256")} for t in record.get("toolkits") or []
    ]
    return {**out, "reason": record.get("reason"), "toolkits": toolkits, "cells": cells}


def retest_summary(record: Mapping[str, Any], report: Mapping[str, Any]) -> tuple[str, str]:
    """(subject, message) of a watcher-started retest (request.retest): served with no build, or a build follows."""
    wheels = [str(k).rsplit("/", 1)[-1] for k in (record.get("request") or {}).get("retest") or []]
    # the test jobs passed and published (Collect listed the bytes for the release): the run succeeded, none failed
    passed = bool(wheels) and report.get("status") == "succeeded" and not report.get("failed")
    day = report.get("release_day") or {}
    minutes = "unknown (no tick time)" if day.get("minutes") is None else f"{day['minutes']} min"
    torch = ", ".join(sorted({str(c.get("torch")) for c in record.get("cells") or []}))
    verdict = f"torch {torch} served, no build" if passed else "retest FAILED"
    lines = [
        f"subscription {record.get('subscription')}: run {report.get('run_id')}: {verdict} ({minutes})",
        f"why it ran: {record.get('reason')}",
        *(f"  {w}: {'passed; listed for torch ' + torch if passed else 'did not pass'}" for w in wheels),
        *(f"  {cell}: {got}" for cell, got in sorted((day.get("cells") or {}).items())),
    ]
    if not passed:
        lines.append("the next watcher tick builds the cells the wheel did not serve")
    lines += [
        f"  {f.get('job_id')}: {f.get('error')}: {str(f.get('cause') or '')[:500]}" for f in report.get("failed") or []
    ]
    lines.append(f"details: wheelfoundry status {report.get('run_id')}")
    subject = f"WheelFoundry {record.get('subscription')}: {verdict} in {minutes}"
    return subject[:SUBJECT_MAX], "\n".join(lines)


def summary(record: Mapping[str, Any], report: Mapping[str, Any]) -> tuple[str, str]:
    """(subject, message) of a watcher-started run's outcome."""
    if (record.get("request") or {}).get("retest"):
        return retest_summary(record, report)
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
    day = report.get("release_day") or {}
    if day:
        minutes = "unknown (no tick time)" if day.get("minutes") is None else f"{day['minutes']} min"
        lines.append(f"tick {day.get('tick_at')} to report {day.get('reported_at')}: {minutes}")
        lines += [f"  {cell}: {got}" for cell, got in sorted((day.get("cells") or {}).items())]
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
