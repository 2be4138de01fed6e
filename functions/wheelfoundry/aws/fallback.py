"""Layout fallback by evidence: a merged wheel that failed the test of its published bytes, in a run that
left the layout to the farm (``layout: auto``), gives way to the cell wheels (docs/contracts.md §6).

Merge's static check (wheelfoundry.publishing.merge.path_loaded) sees compiled files one merged wheel cannot serve.
It cannot see a package's own code finding a Python extension module by path (a glob or a FileFinder
over EXTENSION_SUFFIXES, arithmetic on ``__file__``): that shows only when the merged bytes are imported.
So the test jobs' verdict is the evidence. When a test job reports ``PUBLISHED WHEEL FAILED`` (the
import, a smoke entry point or the package's own tests on the merged bytes; not a lost instance, not the
GPU step, whose failures are a kernel's rather than the layout's), Attest raises MergedWheelFailed
before it signs anything, and the state machine calls Merge again with that error:

1. ``runs/<run>/fallback.json`` records why, first, so a run falls back once at most;
2. what the merged pass's passing test jobs put into the channel is withdrawn (only the objects this run
   created: a wheel another run had published stays), so one layout serves the whole run. Withdrawn is
   yanked (PEP 592, ``<wheel>.yanked`` beside it, wheelfoundry.publishing.index): a channel may have served the name
   already (another run's publish lists the whole channel), so its bytes stay where an edge or a user's
   cache may hold them, and the name is never published again with other bytes;
3. each test job is planned again as ``<id>-per-cell`` under its own prefix (the first pass's results
   and logs stay readable where they are) and the cell wheels are staged for it.

An explicit ``layout: "merged"`` never falls back: its failed test fails the run, as the user asked.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name, parse_wheel_filename

from wheelfoundry.aws.merging import _json, stage_run
from wheelfoundry.publishing.index import YANKED

VERDICT = "PUBLISHED WHEEL FAILED: "
RETEST_SUFFIX = "-per-cell"


def marker_key(run: dict[str, Any]) -> str:
    return f"runs/{run['id']}/fallback.json"


def failed_verdict(result: dict[str, Any]) -> str | None:
    """The first ``PUBLISHED WHEEL FAILED`` line of a failed test job's result.json, else None."""
    if result.get("status") == "succeeded" or result.get("error") != "BuildFailed":
        return None
    try:
        cause = json.loads(result.get("cause") or "")
    except ValueError:
        return None
    tail = cause.get("log_tail") if isinstance(cause, dict) else None
    for line in str(tail or "").splitlines():
        at = line.find(VERDICT)
        if at >= 0:
            return line[at + len(VERDICT) :].strip()
    return None


def evidence(event: dict[str, Any], s3: Any) -> str | None:
    """Why the merged wheels cannot serve this run (a test job's verdict), or None: nothing to fall back from.

    Only for an extension run whose request said ``layout: auto``, whose Merge chose ``merged``, and which
    has not fallen back yet (the state's ``fallback`` and the bucket's marker both say so).
    """
    run = event["run"]
    if not run.get("extension") or str(run.get("layout") or "auto") != "auto" or event.get("fallback"):
        return None
    bucket = run["bucket"]
    merged = _json(s3, bucket, f"runs/{run['id']}/merge.json") or {}
    if merged.get("layout") != "merged" or _json(s3, bucket, marker_key(run)) is not None:
        return None
    for job in event.get("jobs") or []:
        if job.get("kind") != "test":
            continue
        verdict = failed_verdict(_json(s3, bucket, f"{job['prefix']}result.json") or {})
        if verdict:
            return f"{job['id']}: {verdict}"
    return None


def withdraw(s3: Any, run: dict[str, Any], tests: list[dict[str, Any]]) -> list[str]:
    """Yank what this run's merged pass published (unsigned): the next PublishIndex marks it ``data-yanked``."""
    gone = []
    # A fixed reason: the verdict quotes the package's own test output, which stays in fallback.json and the
    # run's report, not on public pages
    reason = f"run {run['id']}: the merged wheel failed the test of its published bytes"[:500]
    for test in tests:
        result = _json(s3, run["bucket"], f"{test['prefix']}result.json") or {}
        for filename in (result.get("collect") or {}).get("published") or []:
            project = canonicalize_name(parse_wheel_filename(filename)[0])
            key = f"wheels/{run['channel']}/{project}/{filename}"
            s3.put_object(Bucket=run["bucket"], Key=f"{key}{YANKED}", Body=reason.encode(), ContentType="text/plain")
            gone.append(key)
    return gone


def retest_jobs(s3: Any, run: dict[str, Any], tests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each test job again, as ``<id>-per-cell`` under its own prefix: its contract copied, id and prefix changed."""
    out = []
    for test in tests:
        if test["id"].endswith(RETEST_SUFFIX):
            raise ValueError(f"{test['id']} is already a per-cell retest")
        new_id = test["id"] + RETEST_SUFFIX
        prefix = f"runs/{run['id']}/jobs/{new_id}/"
        contract = _json(s3, run["bucket"], test["job_key"])
        if not isinstance(contract, dict):
            raise ValueError(f"{test['job_key']}: the test job's contract is missing")
        contract = {**contract, "id": new_id, "run": {**(contract.get("run") or {}), "prefix": prefix}}
        s3.put_object(Bucket=run["bucket"], Key=f"{prefix}job.json", Body=json.dumps(contract, indent=2).encode())
        out.append({**test, "id": new_id, "prefix": prefix, "job_key": f"{prefix}job.json"})
    return out


def restage(event: dict[str, Any], s3: Any, work: Path | None = None) -> dict[str, Any]:
    """Merge's second call after MergedWheelFailed: the cell wheels, staged for new test jobs."""
    run = event["run"]
    why = str((event.get("fallback") or {}).get("Cause") or "")
    with contextlib.suppress(ValueError, AttributeError):  # the Lambda's error payload, else the text itself
        why = json.loads(why).get("errorMessage", why)
    first = list(event.get("failed_tests") or [])
    record: dict[str, Any] = {"from": "merged", "to": "per-cell", "why": why, "tests": [t["id"] for t in first]}
    s3.put_object(Bucket=run["bucket"], Key=marker_key(run), Body=json.dumps(record, indent=2).encode())
    record["withdrawn"] = withdraw(s3, run, first)
    retests = retest_jobs(s3, run, list(event.get("test_jobs") or []))
    record["retests"] = [t["id"] for t in retests]
    s3.put_object(Bucket=run["bucket"], Key=marker_key(run), Body=json.dumps(record, indent=2).encode())
    reason = f"the merged wheel failed the test of its published bytes ({why}); the cell wheels passed their own"
    return stage_run({**event, "test_jobs": retests}, s3, work, layout=("per-cell", reason), note={"fallback": record})
