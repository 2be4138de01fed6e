"""Custom resource handler: publish this folder (the on-instance build bundle) to the wheel bucket.

The function's CodeUri is ``buildspecs/``, so its own code is the bundle. It is zipped
deterministically and stored content-addressed as ``bundles/<sha256>.zip``; ``bundles/current.json``
names the newest. Validate pins that key into each run, so a deploy during a run does not change
the scripts a running job uses. Delete keeps the objects: past runs' manifests refer to them.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import urllib.request
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import boto3

from wfbuild.images import pins

SKIP_PARTS = {"__pycache__", ".pytest_cache", ".mypy_cache"}
FIXED_TIME = (2020, 1, 1, 0, 0, 0)  # zip entries carry no build-time stamp: same files, same hash


def build_zip(root: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            relative = path.relative_to(root)
            if SKIP_PARTS & set(relative.parts) or path.suffix == ".pyc":
                continue
            info = zipfile.ZipInfo(relative.as_posix(), FIXED_TIME)
            info.external_attr = (path.stat().st_mode & 0o777) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def publish(s3: Any, bucket: str, root: Path) -> dict[str, str]:
    body = build_zip(root)
    digest = hashlib.sha256(body).hexdigest()
    key = f"bundles/{digest}.zip"
    s3.put_object(Bucket=bucket, Key=key, Body=body, Metadata={"sha256": digest})
    # What this bundle can build images from, so Validate refuses an unbuildable image before launching.
    pointer = json.dumps({"key": key, "sha256": digest, "pins": pins.summary(root / "images")}).encode()
    s3.put_object(Bucket=bucket, Key="bundles/current.json", Body=pointer, ContentType="application/json")
    return {"Key": key, "Sha256": digest}


def _respond(event: Mapping[str, Any], status: str, data: Mapping[str, str], reason: str) -> dict[str, Any]:
    body = {
        "Status": status,
        "Reason": reason[:1000],
        "PhysicalResourceId": event.get("PhysicalResourceId") or f"{event.get('StackId', '')}/BuildBundle",
        "StackId": event.get("StackId"),
        "RequestId": event.get("RequestId"),
        "LogicalResourceId": event.get("LogicalResourceId"),
        "Data": dict(data),
    }
    url = str(event.get("ResponseURL") or "")
    if url.startswith(("https://", "http://")):  # CloudFormation's presigned URL (http only in the emulator)
        payload = json.dumps(body).encode()
        request = urllib.request.Request(url, data=payload, method="PUT", headers={"Content-Type": ""})  # noqa: S310
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            response.read()
    return body


def handler(event: Mapping[str, Any], context: Any = None, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    env = environ if environ is not None else os.environ
    root = Path(env.get("LAMBDA_TASK_ROOT") or Path(__file__).parent)
    try:
        if event.get("RequestType") == "Delete":
            return _respond(event, "SUCCESS", {}, "bundles are kept for past runs")
        bucket = event["ResourceProperties"]["Bucket"]
        data = publish(boto3.client("s3"), bucket, root)
        return _respond(event, "SUCCESS", data, f"published {data['Key']}")
    except Exception as exc:  # CloudFormation waits an hour for a response that never comes otherwise
        return _respond(event, "FAILED", {}, f"{type(exc).__name__}: {exc}")
