"""Report: the run's outcome in S3, and a JobsFailed error naming each failed job and why."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from wheelfoundry.aws.notify import release_day, watch_record
from wheelfoundry.aws.results import readable_cause
from wheelfoundry.aws.timing import record_cells, report_rows
from wheelfoundry.errors import JobsFailed
from wheelfoundry.publishing.edge import public_urls


def report(
    event: dict[str, Any],
    s3: Any,
    tell: Callable[[dict[str, Any]], Any] | None = None,
    public_index_url: str = "",
    public_channels: str = "",
    now: datetime | None = None,
) -> dict[str, Any]:
    """``tell``: given report.json's body, notify whoever follows the run (a watcher-started run's maintainer).
    ``public_*``: the stack's PublicIndexUrl and PublicChannels, for the URLs a public channel's users type."""
    run = event["run"]
    # A Map iteration that failed outright (TerminateFailed) has no result object: name its job anyway.
    # build_results: the build jobs; results: an extension run's test jobs (the published bytes, testjobs)
    results = [r for r in [*(event.get("build_results") or []), *(event.get("results") or [])] if isinstance(r, dict)]
    reported = {r.get("job_id") for r in results}
    publish = event.get("publish") or {}
    failures = [
        (r.get("job_id", "?"), r.get("error") or "Failed", r.get("cause") or "")
        for r in results
        if r.get("status") != "succeeded"
    ]
    failures += [
        (job["id"], "NoResult", "the job ended before recording its outcome; the reapers terminate its instance")
        for job in [*(event.get("build_jobs") or []), *(event.get("jobs") or [])]
        if job.get("id") not in reported
    ]
    merge = event.get("merge") or {}
    if merge.get("Error"):
        failures.append(("merge", merge["Error"], readable_cause(merge.get("Cause"))[:1000]))
    elif merge.get("status") == "failed":
        why = merge.get("error") or "nothing was staged"
        failures.append(("merge", "NothingPublished", f"{why}: nothing of this run was tested, published or signed"))
    if publish.get("Error"):
        failures.append(("index", publish["Error"], publish.get("Cause", "")[:1000]))
    attest = event.get("attest") or {}
    if attest.get("Error"):  # the Attest state failed: the wheels are published, without provenance
        why = readable_cause(attest.get("Cause"))[:1000]
        failures.append(("provenance", attest["Error"], f"no provenance signed for this run's wheels: {why}"))
    for refused in attest.get("refused") or []:
        failures.append(("provenance", "NotSigned", f"{refused.get('wheel')}: {refused.get('reason')}"[:1000]))
    upload = event.get("upload") or {}
    if upload.get("Error"):  # the Upload state failed: nothing (more) reached the publish target
        why = readable_cause(upload.get("Cause"))[:1000]
        failures.append(("upload", upload["Error"], f"the upload to options.publish failed: {why}"))
    for refused in upload.get("refused") or []:
        failures.append(("upload", "Refused", f"{refused.get('wheel')}: {refused.get('reason')}"[:1000]))
    images = event.get("images") or []
    if isinstance(images, dict):  # the BuildImages Map itself failed
        failures.append(("images", images.get("Error", "Failed"), readable_cause(images.get("Cause"))[:1000]))
        images = [images]
    for image in images:
        if isinstance(image, dict) and image.get("id") and image.get("status") != "pushed":
            why = image.get("cause") or image.get("error") or "the image job reported no push"
            failures.append((image["id"], "ImageFailed", readable_cause(why)[:1000]))
    body = {
        "run_id": run["id"],
        "channel": run["channel"],
        "index_prefix": f"simple/{run['channel']}/",
        "jobs": results,
        "index": publish,
        "public": public_urls(
            run["channel"],
            public_index_url,
            public_channels,
            publish.get("variants") or [],
            publish.get("variant_indexes") or [],
        ),
        "merge": merge,
        "layout": {"chosen": merge.get("layout"), "why": merge.get("layout_reason")} if merge.get("layout") else None,
        "missing_cells": merge.get("missing_cells") or [],
        # per CUDA cell that got to Collect, what its build holds (a refused cell's job failed: see "failed")
        "device_code": {c: r for res in results for c, r in sorted((res.get("device_code") or {}).items())},
        "images": images,
        "upload": {
            k: upload.get(k) for k in ("status", "target", "uploaded", "skipped", "refused", "Error") if k in upload
        },
        "provenance": {
            k: attest.get(k) for k in ("status", "signed", "kept", "tested", "refused", "Error") if k in attest
        },
        "failed": [{"job_id": j, "error": e, "cause": c} for j, e, c in failures],
        "estimated_wall_hours": run.get("estimated_wall_hours"),
        "timing": report_rows(results),  # per job: the plan's estimate against the build's actual hours
        "status": "failed" if failures else "succeeded",
    }
    if (watched := watch_record(s3, run["bucket"], run["id"])) is not None:  # a watcher-started run: release day
        body["release_day"] = release_day(watched, body, now or datetime.now(UTC))
    s3.put_object(Bucket=run["bucket"], Key=f"runs/{run['id']}/report.json", Body=json.dumps(body, indent=2))
    record_cells(s3, run, results)  # the next plan of this source starts from these cells' figures
    if tell is not None:
        tell(body)
    if failures:
        raise JobsFailed(failures)
    return {k: body[k] for k in ("run_id", "channel", "index_prefix", "status", "missing_cells", "public")} | {
        "published": sum(r.get("published", 0) for r in results),
        "layout": merge.get("layout"),
        "signed": len(attest.get("signed") or []),
    }
