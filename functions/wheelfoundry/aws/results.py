"""Collect a job's wheels into its channel, and record each job's outcome."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError
from packaging.utils import canonicalize_name, parse_wheel_filename

from wheelfoundry.errors import ManifestInvalid

CAUSE_IN_STATE = 1000  # characters of a failure's cause kept in the execution state; S3 has all of it


def _head(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    try:
        head: dict[str, Any] = s3.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise
    return head


def _load_manifest(s3: Any, bucket: str, key: str, job_id: str) -> dict[str, Any]:
    try:
        manifest: dict[str, Any] = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except (ClientError, ValueError) as exc:
        raise ManifestInvalid(f"{job_id}: cannot read s3://{bucket}/{key}: {exc}") from exc
    if manifest.get("job_id") != job_id:
        raise ManifestInvalid(f"{key} belongs to {manifest.get('job_id')!r}, not {job_id!r}")
    return manifest


def _copy(s3: Any, bucket: str, source: str, dest: str) -> None:
    s3.copy({"Bucket": bucket, "Key": source}, bucket, dest)


def collect(event: dict[str, Any], s3: Any) -> dict[str, Any]:
    """Publish the wheels the build reported; never overwrite another run's different bytes."""
    job, run, build = event["job"], event["run"], event.get("build") or {}
    if isinstance(build, str):
        build = json.loads(build)
    bucket, channel = run["bucket"], run["channel"]
    manifest = _load_manifest(s3, bucket, build.get("manifest_key", f"{job['prefix']}manifest.json"), job["id"])
    published: list[str] = []
    unchanged: list[str] = []
    conflicts: list[str] = []
    in_manifest = {w.get("name"): w.get("sha256") for w in manifest.get("wheels", [])}
    for wheel in build.get("wheels", []):
        filename, source, sha = wheel["filename"], wheel["key"], wheel["sha256"]
        if in_manifest.get(filename) != sha:
            raise ManifestInvalid(f"{job['id']}: {filename} is not in the manifest with sha256 {sha}")
        head = _head(s3, bucket, source)
        if head is None or head.get("Metadata", {}).get("sha256") != sha:
            raise ManifestInvalid(f"{job['id']}: {source} is missing or its sha256 differs from the manifest")
        project = canonicalize_name(parse_wheel_filename(filename)[0])
        dest = f"wheels/{channel}/{project}/{filename}"
        existing = _head(s3, bucket, dest)
        if existing is not None:
            (unchanged if existing.get("Metadata", {}).get("sha256") == sha else conflicts).append(filename)
            continue
        if wheel.get("metadata_key"):
            _copy(s3, bucket, wheel["metadata_key"], f"{dest}.metadata")
        _copy(s3, bucket, source, dest)  # the wheel last: the index only lists wheels that exist
        published.append(filename)
    return {
        "status": build.get("status", manifest.get("status", "succeeded")),
        "published": published,
        "unchanged": unchanged,
        "conflicts": conflicts,
        "failures": [f"{f.get('package')}/{f.get('python')}: {f.get('stage')}" for f in build.get("failures", [])],
    }


def readable_cause(cause: str | None) -> str:
    """A Lambda error's cause is its JSON error payload: keep the message, drop the stack trace."""
    if not cause:
        return ""
    try:
        payload = json.loads(cause)
    except ValueError:
        return cause
    if isinstance(payload, dict) and "errorMessage" in payload:
        return str(payload["errorMessage"])
    return cause


def record_result(state: dict[str, Any], s3: Any, terminated: list[str], kept: list[str]) -> dict[str, Any]:
    """The job's outcome: full text to S3, a short form for the execution state."""
    job, run = state["job"], state["run"]
    error = state.get("error")
    collect_result = state.get("collect") or {}
    status = "failed" if error else collect_result.get("status", "succeeded")
    if collect_result.get("conflicts") and status == "succeeded":
        status = "partial"
    full = {
        "job_id": job["id"],
        "status": status,
        "error": error.get("Error") if error else None,
        "cause": error.get("Cause") if error else None,
        "collect": collect_result,
        "instances_terminated": terminated,
        "instances_kept": kept,
    }
    s3.put_object(Bucket=run["bucket"], Key=f"{job['prefix']}result.json", Body=json.dumps(full, indent=2))
    cause = readable_cause(full["cause"])
    if not error and status == "partial":
        details = collect_result.get("failures", []) + [f"conflict: {c}" for c in collect_result.get("conflicts", [])]
        cause = "; ".join(details)
    return {
        "job_id": job["id"],
        "status": status,
        "error": full["error"] or ("Partial" if status == "partial" else None),
        "cause": cause[:CAUSE_IN_STATE],
        "published": len(collect_result.get("published", [])),
    }
