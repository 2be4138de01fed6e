"""Issue 10 item 1: Collect trusts nothing the build reported. It re-hashes every wheel's bytes,
reads only keys under the job's own prefix, accepts only safe wheel names of the job's own
packages, and never overwrites another run's different bytes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from wheelfoundry.aws.results import collect
from wheelfoundry.errors import ManifestInvalid, PublishedNameReused

BUCKET = "wf-collect-test"
PREFIX = "runs/run1/jobs/wf-tiny-ext-cpu/"
WHEEL = "wf_tiny_ext-1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
BYTES = b"PK\x03\x04 a wheel's bytes"
SHA = hashlib.sha256(BYTES).hexdigest()


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        client.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        contract = {"id": "wf-tiny-ext-cpu", "packages": [{"name": "wf-tiny-ext"}]}
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}job.json", Body=json.dumps(contract))
        yield client


def _build(s3: Any, name: str = WHEEL, data: bytes = BYTES, sha: str = SHA, **overrides: Any) -> dict[str, Any]:
    key = overrides.pop("key", f"{PREFIX}wheels/{name}")
    s3.put_object(Bucket=BUCKET, Key=key, Body=data, Metadata={"sha256": sha})
    s3.put_object(Bucket=BUCKET, Key=f"{key}.metadata", Body=b"Metadata-Version: 2.1\n")
    manifest = {"job_id": "wf-tiny-ext-cpu", "status": "succeeded", "wheels": [{"name": name, "sha256": sha}]}
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}manifest.json", Body=json.dumps(manifest))
    wheel = {"filename": name, "key": key, "sha256": sha, "metadata_key": f"{key}.metadata"}
    build = {"status": "succeeded", "manifest_key": f"{PREFIX}manifest.json", "wheels": [wheel]}
    for field, value in overrides.items():
        (wheel if field in wheel else build)[field] = value
    return build


def _event(build: dict[str, Any]) -> dict[str, Any]:
    return {
        "job": {"id": "wf-tiny-ext-cpu", "prefix": PREFIX, "job_key": f"{PREFIX}job.json"},
        "run": {"bucket": BUCKET, "channel": "release"},
        "build": build,
    }


def _published(s3: Any) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="wheels/").get("Contents", [])]


def test_verified_wheel_is_published_with_the_hash_collect_computed(s3: Any) -> None:
    result = collect(_event(_build(s3)), s3)
    assert result["published"] == [WHEEL]
    head = s3.head_object(Bucket=BUCKET, Key=f"wheels/release/wf-tiny-ext/{WHEEL}")
    assert head["Metadata"]["sha256"] == SHA
    assert s3.get_object(Bucket=BUCKET, Key=f"wheels/release/wf-tiny-ext/{WHEEL}")["Body"].read() == BYTES


def test_bytes_that_differ_from_the_manifest_are_refused_even_if_the_metadata_agrees(s3: Any) -> None:
    build = _build(s3, data=b"other bytes", sha=SHA)  # object metadata and manifest both claim SHA
    with pytest.raises(ManifestInvalid, match="has sha256"):
        collect(_event(build), s3)
    assert _published(s3) == []


@pytest.mark.parametrize(
    "override",
    [
        {"key": f"runs/run1/jobs/other-job/wheels/{WHEEL}"},  # another job's wheel
        {"key": f"runs/run2/jobs/wf-tiny-ext-cpu/wheels/{WHEEL}"},  # another run's
        {"key": f"sccache/{WHEEL}"},
        {"manifest_key": "runs/run1/jobs/other-job/manifest.json"},
        {"metadata_key": "runs/run1/jobs/other-job/wheels/x.whl.metadata"},
    ],
    ids=["other-job", "other-run", "cache", "manifest", "metadata"],
)
def test_keys_outside_the_job_prefix_are_refused(s3: Any, override: dict[str, Any]) -> None:
    with pytest.raises(ManifestInvalid, match="outside the job's prefix"):
        collect(_event(_build(s3, **override)), s3)
    assert _published(s3) == []


@pytest.mark.parametrize(
    "name",
    [
        "../wf_tiny_ext-1.0-py3-none-any.whl",
        "sub/wf_tiny_ext-1.0-py3-none-any.whl",
        ".wf_tiny_ext-1.0-py3-none-any.whl",
        "wf_tiny_ext-1.0-py3-none-any.whl\n",
        "wf_tiny_ext-1.0-py3-none-any.whl?x=1",
        "wf_tiny_ext.whl",  # not name-version-tags
        "wf_tiny_ext-1.0-py3-none-any.zip",
        "wf_tiny_ext-not..a..version-py3-none-any.whl",
    ],
)
def test_unsafe_wheel_file_names_are_refused(s3: Any, name: str) -> None:
    key = f"{PREFIX}wheels/x.whl"
    with pytest.raises(ManifestInvalid):
        collect(_event(_build(s3, name=name, key=key, filename=name)), s3)
    assert _published(s3) == []


def test_a_wheel_of_another_project_is_refused(s3: Any) -> None:
    torch = "torch-2.5.1-cp311-cp311-manylinux_2_28_x86_64.whl"  # an extension build posing as torch
    with pytest.raises(ManifestInvalid, match="is not a wheel of"):
        collect(_event(_build(s3, name=torch)), s3)
    assert _published(s3) == []


def test_another_runs_different_bytes_are_never_overwritten(s3: Any) -> None:
    dest = f"wheels/release/wf-tiny-ext/{WHEEL}"
    s3.put_object(Bucket=BUCKET, Key=dest, Body=b"released earlier", Metadata={"sha256": "0" * 64})
    result = collect(_event(_build(s3)), s3)
    assert result["conflicts"] == [WHEEL] and result["published"] == []
    assert s3.get_object(Bucket=BUCKET, Key=dest)["Body"].read() == b"released earlier"


def test_a_hostile_build_cannot_get_bytes_published_for_another_job(s3: Any) -> None:
    """The extension build of job A (class-level IAM lets it write job B's keys and, were it a framework
    role, the cache) overwrites job B's wheel and manifest with consistent forged ones. B's Collect
    checks the bytes against B's own callback (sent with B's task token) and refuses; A's Collect
    publishes only A's wheel."""
    victim = "runs/run1/jobs/torch-cpu/"
    genuine = b"PK\x03\x04 the real torch wheel"
    torch = "torch-2.5.1-cp311-cp311-manylinux_2_28_x86_64.whl"
    contract = {"id": "torch-cpu", "packages": [{"name": "torch"}]}
    s3.put_object(Bucket=BUCKET, Key=f"{victim}job.json", Body=json.dumps(contract))
    victim_callback = {
        "manifest_key": f"{victim}manifest.json",
        "wheels": [
            {"filename": torch, "key": f"{victim}wheels/{torch}", "sha256": hashlib.sha256(genuine).hexdigest()}
        ],
    }
    # The hostile build, after B uploaded: forged wheel + a manifest that agrees with it.
    forged = b"PK\x03\x04 torch with a backdoor"
    forged_sha = hashlib.sha256(forged).hexdigest()
    s3.put_object(Bucket=BUCKET, Key=f"{victim}wheels/{torch}", Body=forged, Metadata={"sha256": forged_sha})
    forged_manifest = {"job_id": "torch-cpu", "wheels": [{"name": torch, "sha256": forged_sha}]}
    s3.put_object(Bucket=BUCKET, Key=f"{victim}manifest.json", Body=json.dumps(forged_manifest))
    s3.put_object(Bucket=BUCKET, Key="sccache/cpu-x86_64/poisoned", Body=b"evil object file")
    victim_event = {
        "job": {"id": "torch-cpu", "prefix": victim, "job_key": f"{victim}job.json"},
        "run": {"bucket": BUCKET, "channel": "release"},
        "build": victim_callback,
    }
    with pytest.raises(ManifestInvalid):
        collect(victim_event, s3)
    # The hostile job's own Collect: its own wheel only, whatever else it claims.
    own = _build(s3)
    own["wheels"].append({"filename": torch, "key": f"{victim}wheels/{torch}", "sha256": forged_sha})
    with pytest.raises(ManifestInvalid):
        collect(_event(own), s3)
    own["wheels"].pop()
    assert collect(_event(own), s3)["published"] == [WHEEL]
    assert _published(s3) == [f"wheels/release/wf-tiny-ext/{WHEEL}", f"wheels/release/wf-tiny-ext/{WHEEL}.metadata"]


def test_a_name_the_channel_ever_published_never_gets_other_bytes(s3: Any) -> None:
    """Gone from the bucket is not gone from users' caches: the index state remembers the name (issue 65)."""
    dest = f"wheels/release/wf-tiny-ext/{WHEEL}"
    state = {"format": 1, "wheels": {}, "published": {dest: "0" * 64}}
    s3.put_object(Bucket=BUCKET, Key="simple/release/.index-state.json", Body=json.dumps(state))
    with pytest.raises(PublishedNameReused, match=rf"{WHEEL}: channel 'release' published it with sha256 0{{64}}"):
        collect(_event(_build(s3)), s3)
    assert _published(s3) == []
    state["published"] = {dest: SHA}  # the same bytes may come back
    s3.put_object(Bucket=BUCKET, Key="simple/release/.index-state.json", Body=json.dumps(state))
    assert collect(_event(_build(s3)), s3)["published"] == [WHEEL]
