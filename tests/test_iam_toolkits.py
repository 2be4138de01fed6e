"""Issue 64 item 1: the stack's CUDA toolkit locks (toolkits/ in the bucket) are written by the watcher's role
only, as watch/derived.json is; the extension build roles may read a lock, never write one. Every role and
function policy of template.yaml is evaluated offline (wheelfoundry_local.iam_policy)."""

from __future__ import annotations

from typing import Any

import yaml

from tests.test_iam_matrix import BUCKET, ROOT, _Loader, resolve
from wheelfoundry_local.iam_policy import Request, decide

LOCK = f"{BUCKET}/toolkits/cuda-13.2-x86_64-0123456789abcdef.toml"
INDEX = f"{BUCKET}/toolkits/index.json"
S3_WRITE_TEMPLATES = ("S3CrudPolicy", "S3WritePolicy", "S3FullAccessPolicy")


def policies() -> dict[str, list[Any]]:
    """Each role's and each SAM function's policy documents (a SAM S3 write template counts as a write)."""
    template = yaml.load((ROOT / "template.yaml").read_text(), Loader=_Loader)
    found: dict[str, list[Any]] = {}
    for name, resource in template["Resources"].items():
        props = resource.get("Properties") or {}
        if resource["Type"] == "AWS::IAM::Role":
            found[name] = [resolve(p["PolicyDocument"]) for p in props.get("Policies", [])]
        elif resource["Type"] == "AWS::Serverless::Function":
            docs = []
            for item in props.get("Policies", []) or []:
                if isinstance(item, dict) and "Statement" in item:
                    docs.append(resolve({"Version": "2012-10-17", **item}))
                elif isinstance(item, dict) and any(t in item for t in S3_WRITE_TEMPLATES):
                    docs.append({"Statement": [{"Effect": "Allow", "Action": "s3:PutObject", "Resource": "*"}]})
            found[name] = docs
    return found


def allowed(action: str, resource: str) -> set[str]:
    request = Request(action, resource, {"aws:SecureTransport": "true"})
    return {name for name, docs in policies().items() if docs and decide(request, docs, []) == "Allow"}


def test_only_the_watcher_writes_toolkit_locks_and_their_record() -> None:
    assert allowed("s3:PutObject", LOCK) == {"WatchFunction"}
    assert allowed("s3:PutObject", INDEX) == {"WatchFunction"}
    assert allowed("s3:PutObject", f"{BUCKET}/watch/derived.json") == {"WatchFunction"}  # the same scope


def test_the_extension_builds_read_a_lock_and_validate_reads_the_record() -> None:
    readers = allowed("s3:GetObject", LOCK)
    assert {"ExtensionBuildInstanceRole", "CodeBuildExtensionRole", "WatchFunction"} <= readers
    assert not readers & {"FrameworkJobRole", "ExtensionJobRole"}  # the job's own code never reads it
    assert {"ValidateFunction", "WatchFunction"} <= allowed("s3:GetObject", INDEX)
