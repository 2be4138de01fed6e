"""Attest: after a run's wheels were published, sign a provenance statement for each.

An extension run's wheels reach the channel only from its test jobs, after the published bytes passed
(wheelfoundry.planning.testjobs): what is signed was installed and tested exactly as users get it.

The statement is built from what this function reads itself: the wheel's bytes in the channel (hashed
here, not taken from metadata), the job manifests under the run's prefix, the request Validate stored.
The envelope goes beside the wheel (``<wheel>.provenance.json``); PublishIndex links it. A wheel whose
bytes do not hash to what its manifest (or merge.json) says is not signed: the run records why.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError
from packaging.utils import canonicalize_name, parse_wheel_filename

from wheelfoundry.errors import ProvenanceInvalid
from wheelfoundry.publishing import provenance
from wheelfoundry.publishing.edge import PAGE_CACHE


def _json(s3: Any, bucket: str, key: str) -> Any:
    try:
        return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except (ClientError, ValueError):
        return None


def _exists(s3: Any, bucket: str, key: str) -> bool:
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError:
        return False
    return True


def _sha256(body: Any) -> Any:
    digest = hashlib.sha256()
    for chunk in iter(lambda: body.read(8 << 20), b""):
        digest.update(chunk)
    return digest


def state_machine_arn(execution_arn: str) -> str:
    """arn:aws:states:R:A:execution:SM:NAME (or a Map child's SM/MAP:NAME) -> arn:aws:states:R:A:stateMachine:SM."""
    parts = execution_arn.split(":")
    if len(parts) < 8 or parts[5] != "execution":
        raise ProvenanceInvalid(f"execution {execution_arn!r} is not a Step Functions execution ARN")
    return ":".join([*parts[:5], "stateMachine", parts[6].split("/", 1)[0]])


def published(s3: Any, bucket: str, run: dict[str, Any], jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """This run's wheels in the channel: (filename, key, expected sha256, manifests by key).

    Only jobs publish: a framework build job its smoke-tested wheels, an extension run's test jobs the
    wheels that passed the test of their published bytes (an extension build job publishes nothing).
    A test job's wheel carries every build manifest of the run (sources, toolchains) and its own.
    """
    channel, out = run["channel"], []
    manifests = {f"{j['prefix']}manifest.json": _json(s3, bucket, f"{j['prefix']}manifest.json") for j in jobs}
    manifests = {k: m for k, m in manifests.items() if isinstance(m, dict)}
    for job in jobs:
        result = _json(s3, bucket, f"{job['prefix']}result.json") or {}
        collect = result.get("collect") or {}
        key = f"{job['prefix']}manifest.json"
        by_name = {w.get("name"): w.get("sha256") for w in (manifests.get(key) or {}).get("wheels", [])}
        mine = manifests if job.get("kind") == "test" else {key: manifests.get(key)}
        for filename in (collect.get("published") or []) + (collect.get("unchanged") or []):
            project = canonicalize_name(parse_wheel_filename(filename)[0])
            dest = f"wheels/{channel}/{project}/{filename}"
            out.append({"filename": filename, "key": dest, "sha256": by_name.get(filename), "manifests": mine})
    return out


def attest_run(
    event: dict[str, Any], s3: Any, sign: Callable[[bytes], bytes], key_id: str, stack: str
) -> dict[str, Any]:
    run = event["run"]
    jobs = (event.get("build_jobs") or []) + (event.get("jobs") or [])  # test jobs after the build jobs
    bucket = run["bucket"]
    request_key = f"runs/{run['id']}/request.json"
    try:  # read once: the provenance records the request, a test result its digest
        body = s3.get_object(Bucket=bucket, Key=request_key)["Body"].read()
        request = json.loads(body)
    except (ClientError, ValueError):
        body, request = None, {}
    digest = {"sha256": hashlib.sha256(body).hexdigest()} if body else None
    ref = {"uri": f"s3://{bucket}/{request_key}", "digest": digest} if digest else None
    builder = {"stack": stack, "state_machine": state_machine_arn(event["execution"])}
    out: dict[str, Any] = {"status": "succeeded", "signed": [], "kept": [], "unsigned": [], "refused": []}
    collected = _collected(s3, bucket, jobs)
    fresh = {f for c in collected for f in c.get("published") or []}  # this run wrote them
    wheels = published(s3, bucket, run, jobs)
    for wheel in wheels:
        if wheel["filename"] in out["signed"]:  # an abi3 wheel each Python's test job published: signed once
            continue
        target = f"{wheel['key']}{provenance.SUFFIX}"
        if wheel["filename"] not in fresh:  # unchanged bytes keep the provenance of the run that built them
            if wheel["filename"] not in out["kept"] + out["unsigned"]:  # this run built nothing to sign for them
                out["kept" if _exists(s3, bucket, target) else "unsigned"].append(wheel["filename"])
            continue
        digest = _sha256(s3.get_object(Bucket=bucket, Key=wheel["key"])["Body"])
        if digest.hexdigest() != wheel["sha256"]:
            why = f"{wheel['key']} hashes to {digest.hexdigest()}, its manifest says {wheel['sha256']}"
            out["refused"].append({"wheel": wheel["filename"], "reason": why})
            continue
        subject = {"filename": wheel["filename"], "sha256": digest.hexdigest()}
        stmt = provenance.statement(
            subject, request, wheel["manifests"], builder, {**run, "execution": event["execution"]}
        )
        data = json.dumps(provenance.envelope(stmt, key_id, sign), indent=1).encode()
        # max-age, not immutable: a wheel whose bytes another run publishes again is signed again
        s3.put_object(Bucket=bucket, Key=target, Body=data, ContentType="application/json", CacheControl=PAGE_CACHE)
        out["signed"].append(wheel["filename"])
    extended = {f for c in collected for f in c.get("extended") or []}
    out["tested"] = _sign_retests(s3, run, event["execution"], wheels, extended, ref, sign, key_id, out)
    if out["refused"]:
        out["status"] = "partial"
    s3.put_object(Bucket=bucket, Key=f"runs/{run['id']}/attest.json", Body=json.dumps(out, indent=2).encode())
    return out


def _sign_retests(
    s3: Any, run: dict[str, Any], execution: str, wheels: list[dict[str, Any]], extended: set[str],
    ref: dict[str, Any] | None, sign: Callable[[bytes], bytes], key_id: str, out: dict[str, Any],
) -> list[str]:  # fmt: skip
    """A signed test result (``<wheel>.tests/<run>.json``, ``ref``: the run's request) for each published wheel whose
    bytes this run tested in more torch releases (Collect's ``extended``); the wheel's provenance stays the build's."""
    bucket, signed = run["bucket"], []
    for wheel in wheels:
        if wheel["filename"] not in extended or wheel["filename"] in signed:
            continue
        digest = _sha256(s3.get_object(Bucket=bucket, Key=wheel["key"])["Body"]).hexdigest()
        passed = provenance.tested_in(wheel["manifests"], wheel["filename"])
        if digest != wheel["sha256"] or not passed or ref is None:
            why = f"{wheel['key']} hashes to {digest}, its test manifest says {wheel['sha256']}"
            why = why if digest != wheel["sha256"] else "no passed cells" if not passed else "no request.json"
            out["refused"].append({"wheel": wheel["filename"], "reason": why})
            continue
        stmt = provenance.test_result({"filename": wheel["filename"], "sha256": digest}, passed, ref,
                                      {**run, "execution": execution})  # fmt: skip
        data = json.dumps(provenance.envelope(stmt, key_id, sign), indent=1).encode()
        target = f"{wheel['key']}{provenance.TESTS_DIR}{run['id']}.json"
        s3.put_object(Bucket=bucket, Key=target, Body=data, ContentType="application/json", CacheControl=PAGE_CACHE)
        signed.append(wheel["filename"])
    return signed


def _collected(s3: Any, bucket: str, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each job's Collect record (its result.json's ``collect``): what it published, found unchanged, extended."""
    return [((_json(s3, bucket, f"{job['prefix']}result.json") or {}).get("collect") or {}) for job in jobs]
