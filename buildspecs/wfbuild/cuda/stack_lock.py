"""A CUDA toolkit lock of the stack's (the watcher wrote it under ``toolkits/`` in the bucket), byte-checked.

The bundle carries the repository's locks; a CUDA release newer than the deployment is locked by the stack's
watcher instead (functions/wheelfoundry/toolkits/stack_toolkits.py), and the job's contract names that lock as
``toolkit_lock: {"key", "sha256"}``. Host mode downloads it into ``<root>/toolkits/stack-locks/<sha256>/``
under the name install_cuda.py reads (``cuda-<X.Y>-<platform>.toml``) only after its bytes hash to the
contract's sha256: a lock changed in the bucket after Validate is refused, never installed. The folder is named
by the digest, so the toolkit's cache key (the lock's bytes) is the digest's too. Container mode builds the
builder image from a copy of the bundle's ``images/`` holding that lock where install_cuda.py reads the
bundle's (``image_bundle``): the image's tag covers the lock's bytes, as it covers every lock's.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

_KEY = re.compile(r"^toolkits/cuda-\d+\.\d+-(x86_64|aarch64)-[0-9a-f]{16}\.toml$")
_SHA = re.compile(r"^[0-9a-f]{64}$")

Get = Callable[[str, str], bytes]  # (bucket, key) -> the object's bytes


class StackLockError(Exception):
    """The contract's stack lock cannot be used: malformed, or its bytes are not the ones Validate named."""


def s3_get(bucket: str, key: str) -> bytes:
    """The build host's read of the bucket (its instance or CodeBuild role may read ``toolkits/cuda-*.toml``)."""
    import boto3  # the build host's; only a job naming a stack lock needs it

    client = boto3.client("s3", region_name=os.environ.get("AWS_REGION"))
    body: bytes = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    return body


def named(job: Mapping[str, Any]) -> tuple[str, str] | None:
    """(key, sha256) of the contract's stack lock; None: the bundle's lock is the one."""
    lock = job.get("toolkit_lock")
    if lock is None:
        return None
    key, sha = (lock.get("key"), lock.get("sha256")) if isinstance(lock, Mapping) else (None, None)
    if not isinstance(key, str) or not _KEY.match(key) or not isinstance(sha, str) or not _SHA.match(sha):
        raise StackLockError(f"toolkit_lock: {lock!r} is not a toolkits/ key with a 64-hex sha256")
    return key, sha


def folder(job: Mapping[str, Any], root: Path) -> Path | None:
    """Where the job's stack lock is kept under ``root`` (install_cuda.py's ``locks``); None: the bundle's."""
    found = named(job)
    return None if found is None else root / "toolkits" / "stack-locks" / found[1]


def fetch(get: Get, bucket: str, job: Mapping[str, Any], cuda: str, platform: str, root: Path) -> Path | None:
    """Download and byte-check the job's stack lock; the folder holding it (None: the job uses the bundle's)."""
    found, where = named(job), folder(job, root)
    if found is None or where is None:
        return None
    key, expected = found
    if not key.startswith(f"toolkits/cuda-{cuda}-{platform}-"):
        raise StackLockError(f"toolkit_lock {key}: not a CUDA {cuda} {platform} lock, which the job builds with")
    target = where / f"cuda-{cuda}-{platform}.toml"
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == expected:
        return where  # an earlier job on this machine fetched these very bytes
    body = get(bucket, key)
    actual = hashlib.sha256(body).hexdigest()
    if actual != expected:
        raise StackLockError(
            f"toolkit_lock {key}: sha256 {actual} is not the {expected} the job's contract names; refusing it"
        )
    where.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=where, prefix=f"{target.name}.", suffix=".part")  # one per job
    with os.fdopen(handle, "wb") as partial:
        partial.write(body)
    os.replace(name, target)  # whole or absent: a concurrent job never reads half a lock
    return where


def image_bundle(get: Get, job: Mapping[str, Any], bundle: Path, work: Path) -> Path:
    """Container mode: the bundle the builder image is made from. ``bundle`` itself, or for a job whose lock is
    the stack's, ``<work>/image-bundle`` with a copy of its ``images/`` holding that lock (fetched and
    byte-checked here) as ``scripts/cuda/cuda-<X.Y>-<platform>.toml``."""
    if named(job) is None:
        return bundle
    cuda, platform = str(job["image"]["build_args"]["CUDA_VERSION"]), str(job["platform"])
    held = fetch(get, job["run"]["bucket"], job, cuda, platform, work)
    assert held is not None  # named: fetched or raised
    copy = work / "image-bundle"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(bundle / "images", copy / "images", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    name = f"cuda-{cuda}-{platform}.toml"
    shutil.copyfile(held / name, copy / "images" / "scripts" / "cuda" / name)
    return copy
