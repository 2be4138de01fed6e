"""Collect a job's wheels into its channel, and record each job's outcome."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from botocore.exceptions import ClientError
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from wheelfoundry.aws.shared_wheels import all_passed, sharing
from wheelfoundry.aws.timing import job_timing
from wheelfoundry.config import load_config
from wheelfoundry.errors import ManifestInvalid, PublishedNameReused
from wheelfoundry.publishing import served
from wheelfoundry.publishing.edge import WHEEL_CACHE
from wheelfoundry.publishing.index import published_sha256

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


def _copy(
    s3: Any, bucket: str, source: str, dest: str, version: str | None = None, metadata: dict[str, str] | None = None
) -> None:
    copy_source = {"Bucket": bucket, "Key": source, **({"VersionId": version} if version else {})}
    # Cache-Control travels with the object: a public channel's edge keeps a wheel for a year (immutable).
    extra: dict[str, Any] = {"CacheControl": WHEEL_CACHE, "MetadataDirective": "REPLACE"}
    if metadata:
        extra |= {"Metadata": metadata, "ContentType": "application/zip"}
    s3.copy(copy_source, bucket, dest, ExtraArgs=extra)


# A wheel file name as PEP 427 spells it: no path separators, no leading dot, nothing a shell,
# a URL or an S3 key would read differently. parse_wheel_filename then checks the structure.
WHEEL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+!-]*\.whl$")
JOB_PREFIX = re.compile(r"^runs/[A-Za-z0-9_-]{1,80}/jobs/[A-Za-z0-9._-]{1,160}/$")
HASH_CHUNK = 8 * 1024 * 1024


def safe_wheel_name(job_id: str, filename: object) -> str:
    if not isinstance(filename, str) or not WHEEL_NAME.fullmatch(filename) or ".." in filename:
        raise ManifestInvalid(f"{job_id}: unsafe wheel file name {filename!r}")
    try:
        parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise ManifestInvalid(f"{job_id}: {exc}") from None
    return filename


def _expect_key(job_id: str, what: str, key: object, expected: str) -> str:
    """The build reports keys; only the ones its own job prefix dictates are accepted."""
    if key != expected:
        raise ManifestInvalid(f"{job_id}: {what} {key!r} is not {expected!r} (outside the job's prefix)")
    return expected


def verified_version(s3: Any, bucket: str, key: str, sha: str, job_id: str) -> tuple[str | None, dict[str, str]]:
    """Read the object's bytes and hash them; return the version read (so the copy takes exactly those
    bytes even if the key is overwritten meanwhile) and the metadata to publish with them.
    The object's own sha256 metadata is not trusted."""
    try:
        obj = s3.get_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        raise ManifestInvalid(f"{job_id}: cannot read s3://{bucket}/{key}: {exc}") from exc
    digest = hashlib.sha256()
    body = obj["Body"]
    for chunk in iter(lambda: body.read(HASH_CHUNK), b""):
        digest.update(chunk)
    if digest.hexdigest() != sha:
        raise ManifestInvalid(f"{job_id}: {key} has sha256 {digest.hexdigest()}, the manifest says {sha}")
    version = obj.get("VersionId")
    # The published copy's sha256 metadata is the hash computed here, not what the build claimed.
    metadata = {**obj.get("Metadata", {}), "sha256": sha}
    return (version if version and version != "null" else None), metadata


def job_contract(s3: Any, bucket: str, job: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The job.json Validate wrote (not the build)."""
    key = _expect_key(job["id"], "job_key", job.get("job_key", f"{prefix}job.json"), f"{prefix}job.json")
    try:
        contract = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        if not isinstance(contract, dict):
            raise ValueError("not a JSON object")
        return contract
    except (ClientError, ValueError) as exc:
        raise ManifestInvalid(f"{job['id']}: cannot read the job contract s3://{bucket}/{key}: {exc}") from exc


def publish_metadata(s3: Any, bucket: str, source: str, dest: str) -> None:
    """The wheel's METADATA beside it, with the sha256 the index needs for PEP 658's data-core-metadata."""
    body = s3.get_object(Bucket=bucket, Key=source)["Body"].read()
    digest = hashlib.sha256(body).hexdigest()
    meta = {"ContentType": "text/plain", "Metadata": {"sha256": digest}, "CacheControl": WHEEL_CACHE}
    s3.put_object(Bucket=bucket, Key=dest, Body=body, **meta)


def staged_digests(s3: Any, run: dict[str, Any], job: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
    """A test job's wheels as Merge staged them (merge.json, outside the job's prefix); None for a build job.

    The test host runs the package's code and can write its own prefix: only the bytes Merge wrote publish.
    """
    if job.get("kind") != "test":
        return None
    try:
        merge = json.loads(s3.get_object(Bucket=run["bucket"], Key=f"runs/{run['id']}/merge.json")["Body"].read())
    except (ClientError, ValueError) as exc:
        raise ManifestInvalid(f"{job['id']}: cannot read what Merge staged: {exc}") from exc
    shared = sharing(merge.get("wheels", []))
    return {
        w["filename"]: {**w, **({"shared": shared[w["filename"]]} if w["filename"] in shared else {})}
        for w in merge.get("wheels", [])
        if w.get("test_job") == job["id"]
    }


def allowed_projects(contract: dict[str, Any], job_id: str) -> set[str]:
    """The projects this job may publish: its contract's packages."""
    try:
        return {canonicalize_name(p["name"]) for p in contract.get("packages", [])}
    except (KeyError, TypeError) as exc:
        raise ManifestInvalid(f"{job_id}: the job contract names no packages: {exc}") from exc


def collect(event: dict[str, Any], s3: Any) -> dict[str, Any]:
    """Publish the wheels the build reported, after checking each against the manifest by its bytes.

    The build's callback output is untrusted (the build runs other people's code): only keys under
    the job's own prefix are read, file names must be safe wheel names of the job's own packages,
    and every wheel's sha256 is recomputed from the object. Another run's different bytes are never
    overwritten.
    """
    job, run, build = event["job"], event["run"], event.get("build") or {}
    if isinstance(build, str):
        build = json.loads(build)
    bucket, channel, prefix = run["bucket"], run["channel"], job["prefix"]
    if not isinstance(prefix, str) or not JOB_PREFIX.fullmatch(prefix):
        raise ManifestInvalid(f"{job['id']}: job prefix {prefix!r} is not runs/<run>/jobs/<job>/")
    manifest_key = _expect_key(
        job["id"], "manifest_key", build.get("manifest_key", f"{prefix}manifest.json"), f"{prefix}manifest.json"
    )
    manifest = _load_manifest(s3, bucket, manifest_key, job["id"])
    contract = job_contract(s3, bucket, job, prefix)
    projects = allowed_projects(contract, job["id"])
    staged = staged_digests(s3, run, job)
    published: list[str] = []
    unchanged: list[str] = []
    extended: list[str] = []  # unchanged bytes whose record gained torch releases (a retest, request.retest)
    awaiting: list[str] = []  # a wheel other test jobs test too: published by the last of them to pass
    conflicts: list[str] = []
    verified: list[str] = []
    in_manifest = {w.get("name"): w.get("sha256") for w in manifest.get("wheels", [])}
    checked = []  # every wheel is checked before any is published: a bad entry publishes nothing
    for wheel in build.get("wheels", []):
        filename = safe_wheel_name(job["id"], wheel.get("filename"))
        source = _expect_key(job["id"], "wheel key", wheel.get("key"), f"{prefix}wheels/{filename}")
        sha = wheel.get("sha256")
        if not isinstance(sha, str) or in_manifest.get(filename) != sha:
            raise ManifestInvalid(f"{job['id']}: {filename} is not in the manifest with sha256 {sha}")
        project = canonicalize_name(parse_wheel_filename(filename)[0])
        if project not in projects:  # an extension build must not publish "torch" into the channel
            raise ManifestInvalid(f"{job['id']}: {filename} is not a wheel of {sorted(projects)}")
        metadata_key = wheel.get("metadata_key")
        if metadata_key:
            metadata_key = _expect_key(job["id"], "metadata_key", metadata_key, f"{source}.metadata")
        if staged is not None and (staged.get(filename) or {}).get("sha256") != sha:
            raise ManifestInvalid(f"{job['id']}: {filename} (sha256 {sha}) is not a wheel Merge staged for this test")
        version, metadata = verified_version(s3, bucket, source, sha, job["id"])
        if staged is not None:  # which (torch, CUDA) indexes list it: Merge's record, not the test host's
            mine = staged[filename]
            metadata["wf-variants"] = ",".join((mine.get("shared") or mine).get("variants") or [])
        checked.append((filename, source, sha, project, metadata_key, version, metadata))
    # A GPU test comes first (options.gpu_test): check now, publish in the "publish" phase after it passed.
    held = bool(job.get("gpu_test")) and event.get("phase") != "publish"
    ever: dict[str, str] | None = None  # the channel's index state: every name it ever published
    for filename, source, sha, project, metadata_key, version, metadata in checked:
        if held or job.get("kind") == "extension":  # cell wheels stay in the job's prefix: Merge stages them
            verified.append(filename)
            continue
        shared = (staged or {}).get(filename, {}).get("shared")
        if shared and (waiting := all_passed(s3, run, filename, job["id"], shared["jobs"])):
            awaiting.append(f"{filename}: also staged for {', '.join(waiting)}, not passed yet")
            continue  # the last of its test jobs to pass publishes it (aws.shared_wheels)
        dest = f"wheels/{channel}/{project}/{filename}"
        existing = _head(s3, bucket, dest)
        if existing is not None:
            same = existing.get("Metadata", {}).get("sha256") == sha
            (unchanged if same else conflicts).append(filename)
            listed = existing.get("Metadata", {}).get("wf-variants", "").split(",")
            if (
                same
                and staged is not None
                and served.mark(s3, bucket, dest, listed, metadata["wf-variants"].split(","))
            ):
                extended.append(filename)  # these bytes passed in more torch releases: listed there too
            continue
        ever = published_sha256(s3, bucket, channel) if ever is None else ever
        if ever.get(dest, sha) != sha:  # gone from the bucket, not from users' caches
            raise PublishedNameReused(
                f"{job['id']}: {filename}: channel {channel!r} published it with sha256 {ever[dest]}; "
                f"this build's is {sha}: a published name never gets new bytes (publish a new version)"
            )
        if metadata_key:
            publish_metadata(s3, bucket, metadata_key, f"{dest}.metadata")
        _copy(s3, bucket, source, dest, version, metadata)  # the wheel last: the index only lists wheels that exist
        published.append(filename)
    return {
        "status": build.get("status", manifest.get("status", "succeeded")),
        "published": published,
        "verified": verified,
        "unchanged": unchanged,
        "extended": extended,
        "awaiting": awaiting,
        "conflicts": conflicts,
        "failures": [f"{f.get('package')}/{f.get('python')}: {f.get('stage')}" for f in build.get("failures", [])],
        "timing": job_timing(contract, manifest, load_config()),  # estimated against actual (report.json)
        # per CUDA cell, what its build holds ({} for other jobs): report.json carries it
        "device_code": device_code_summary(
            manifest, {c.get("id") for c in (contract.get("extension") or {}).get("cells") or []}
        ),
    }


def device_code_summary(manifest: dict[str, Any], cells: set[Any]) -> dict[str, Any]:
    """``{cell: {status, arch_list, sass, ptx, missing}}`` for a CUDA extension job (what each cell's build holds,
    wfbuild.cuda.devicecode), ``{}`` for any other job. The manifest is the build's: only the contract's ``cells``
    count, each list and string cut short (the execution's state stays small)."""
    records = manifest.get("device_code")
    if not isinstance(records, dict) or not records:
        return {}

    def short(value: Any) -> Any:
        if isinstance(value, list):
            return [str(v)[:40] for v in value[:32]]
        return str(value)[:80] if value is not None else None

    keys = ("status", "arch_list", "sass", "ptx", "missing")
    out = {
        c: {k: short(r.get(k)) for k in keys} for c, r in sorted(records.items()) if c in cells and isinstance(r, dict)
    }
    return out


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


def gpu_result(state: dict[str, Any]) -> dict[str, Any] | None:
    """The GPU test's verdict (the GpuTest task's output), or why it did not end in one."""
    if not (state["job"].get("gpu_test")):
        return None
    output = state.get("gpu")
    if isinstance(output, str):
        try:
            output = json.loads(output)
        except ValueError:
            output = {"verdict": "unknown", "detail": output}
    if isinstance(output, dict):
        return output
    error = state.get("error") or {}
    if error.get("Error") == "GpuTestFailed":
        return {"verdict": "failed", "detail": readable_cause(error.get("Cause")).split("\n", 1)[0]}
    return {"verdict": "not run", "detail": f"the job ended before its GPU test ({error.get('Error', 'no error')})"}


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
        "gpu_test": gpu_result(state),
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
        "gpu_test": (full["gpu_test"] or {}).get("verdict"),  # None: no GPU test asked
        "timing": collect_result.get("timing"),
        "device_code": collect_result.get("device_code") or {},  # per CUDA cell that reached Collect (report.json)
    }
