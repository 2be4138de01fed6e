"""A retest (request.retest) against S3 (moto): Validate reads the wheel from the channel's index, Merge stages
those exact bytes for the test job's new cells, Collect adds the torch releases the test passed to the published
wheel (same bytes), and the next index lists it on the new torch's page."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import s3_bucket
from tests.test_merge import cell_wheel
from wheelfoundry.aws.merging import stage_run
from wheelfoundry.aws.results import collect
from wheelfoundry.aws.retests import retest_wheels
from wheelfoundry.errors import RequestInvalid
from wheelfoundry.publishing import served
from wheelfoundry.publishing.index import channel_state, publish_index

BUCKET = "wf-bucket"
NEW = {"id": "torch2.14.1-cp311-cpu-x86_64", "torch_version": "2.14.1", "python": "3.11"}
TEST = {"id": "my-ext-test-cp311-x86_64", "kind": "test", "prefix": "runs/rt-1/jobs/my-ext-test-cp311-x86_64/"}


def put(s3: Any, key: str, body: Any, **extra: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key=key, Body=body if isinstance(body, bytes) else json.dumps(body).encode(), **extra)


@pytest.fixture
def s3() -> Iterator[Any]:
    with s3_bucket(BUCKET) as client:
        yield client


def published(s3: Any, tmp_path: Path, label: str = "abi213cpu") -> tuple[str, str, bytes]:
    """A stable wheel in channel ci as a build run left it (variants torch 2.13.0), and the channel's index."""
    path = cell_wheel(tmp_path / "built", label)
    data = path.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    key = f"wheels/ci/my-ext/{path.name}"
    put(s3, key, data, Metadata={"sha256": sha, "wf-variants": "torch-2.13.0+cpu"})
    publish_index(s3, BUCKET, "ci")
    return key, sha, data


def test_validate_records_the_channel_s_bytes_and_refuses_a_wheel_it_does_not_serve(s3: Any, tmp_path: Path) -> None:
    key, sha, _ = published(s3, tmp_path)
    (entry,) = retest_wheels(s3, BUCKET, "ci", (key,))
    assert entry == {"key": key, "filename": key.rsplit("/", 1)[1], "sha256": sha, "variants": ["torch-2.13.0+cpu"]}
    gone = key.replace("abi213cpu", "abi212cpu")
    with pytest.raises(RequestInvalid) as caught:
        retest_wheels(s3, BUCKET, "ci", (key, gone))
    (issue,) = caught.value.issues
    assert issue.path == "retest[1]" and "channel 'ci' does not serve it (not in its index)" in issue.message
    put(s3, f"{key}.yanked", b"broken on 2.14")
    publish_index(s3, BUCKET, "ci")
    with pytest.raises(RequestInvalid, match=r"does not serve it \(yanked\)"):
        retest_wheels(s3, BUCKET, "ci", (key,))


def retest_run(s3: Any, key: str) -> dict[str, Any]:
    run = {"id": "rt-1", "bucket": BUCKET, "channel": "ci", "layout": "per-cell", "require_all_cells": False}
    put(s3, f"{TEST['prefix']}job.json", {"kind": "test", "platform": "x86_64", "packages": [{"name": "my-ext"}],
                                          "extension": {"name": "my-ext", "cells": [{**NEW, "cuda": None}]}})  # fmt: skip
    return {**run, "retest": retest_wheels(s3, BUCKET, "ci", (key,))}


def test_merge_stages_the_published_bytes_for_the_new_cells_with_no_build(s3: Any, tmp_path: Path) -> None:
    key, sha, data = published(s3, tmp_path)
    run = retest_run(s3, key)
    out = stage_run({"run": run, "jobs": [], "test_jobs": [TEST]}, s3, tmp_path)
    assert out["status"] == "succeeded" and out["layout"] == "per-cell" and out["layout_reason"].startswith("retest")
    (staged,) = out["wheels"]
    assert (staged["filename"], staged["sha256"], staged["cells"], staged["builds"]) == (
        key.rsplit("/", 1)[1], sha, [NEW["id"]], [])  # fmt: skip
    assert staged["variants"] == ["torch-2.14.1+cpu"] and out["test_jobs"] == [TEST]
    assert s3.get_object(Bucket=BUCKET, Key=staged["key"])["Body"].read() == data
    put(s3, key, b"PK other bytes", Metadata={"sha256": sha})  # the channel's object no longer what its index says
    failed = stage_run({"run": run, "jobs": [], "test_jobs": [TEST]}, s3, tmp_path)
    assert failed["status"] == "failed" and "the channel's index says" in failed["error"] and failed["wheels"] == []


def test_a_cu13_wheel_is_not_staged_for_a_cpu_cell(s3: Any, tmp_path: Path) -> None:
    key, _, _ = published(s3, tmp_path, "abi213cu13")
    out = stage_run({"run": retest_run(s3, key), "jobs": [], "test_jobs": [TEST]}, s3, tmp_path)
    assert out["wheels"] == [] and out["test_jobs"] == []  # nothing to test: nothing reaches the channel


def test_collect_adds_the_passed_torch_to_the_same_bytes_and_the_index_lists_it(s3: Any, tmp_path: Path) -> None:
    key, sha, data = published(s3, tmp_path)
    before = s3.head_object(Bucket=BUCKET, Key=key)
    run = retest_run(s3, key)
    (staged,) = stage_run({"run": run, "jobs": [], "test_jobs": [TEST]}, s3, tmp_path)["wheels"]
    name = staged["filename"]
    put(s3, f"{TEST['prefix']}wheels/{name}", data)  # the test job's copy of what it installed and tested
    put(s3, f"{TEST['prefix']}manifest.json", {"job_id": TEST["id"], "wheels": [{"name": name, "sha256": sha}]})
    wheel = {"filename": name, "key": f"{TEST['prefix']}wheels/{name}", "sha256": sha}
    out = collect({"job": TEST, "run": run, "build": {"wheels": [wheel]}}, s3)
    assert out["published"] == [] and out["unchanged"] == [name] and out["extended"] == [name]
    head = s3.head_object(Bucket=BUCKET, Key=key)  # the published object is not touched: bytes, metadata, time
    assert head["Metadata"] == {"sha256": sha, "wf-variants": "torch-2.13.0+cpu"}
    assert (head["ETag"], head["LastModified"]) == (before["ETag"], before["LastModified"])
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == data
    assert s3.head_object(Bucket=BUCKET, Key=f"{key}{served.SERVED}torch-2.14.1+cpu")["ContentLength"] == 0
    publish_index(s3, BUCKET, "ci")
    assert channel_state(s3, BUCKET, "ci")["wheels"][key]["variants"] == ["torch-2.13.0+cpu", "torch-2.14.1+cpu"]
    page = s3.get_object(Bucket=BUCKET, Key="simple/ci/torch-2.14.1+cpu.html")["Body"].read().decode()
    assert name in page
    again = collect({"job": TEST, "run": run, "build": {"wheels": [wheel]}}, s3)
    assert again["unchanged"] == [name] and again["extended"] == []  # nothing new: no marker


def test_two_retests_finishing_together_both_reach_the_index(s3: Any, tmp_path: Path) -> None:
    # Each read the wheel before the other wrote: a copy with merged metadata would keep only the later release.
    key, _, _ = published(s3, tmp_path)
    listed = s3.head_object(Bucket=BUCKET, Key=key)["Metadata"]["wf-variants"].split(",")
    assert served.mark(s3, BUCKET, key, listed, ["torch-2.14.1+cpu"]) == ["torch-2.14.1+cpu"]
    assert served.mark(s3, BUCKET, key, listed, ["torch-2.15.0+cpu", "torch-2.13.0+cpu"]) == ["torch-2.15.0+cpu"]
    assert served.mark(s3, BUCKET, key, listed, ["torch-2.14.1+cpu", "not a variant"]) == []
    publish_index(s3, BUCKET, "ci")
    variants = channel_state(s3, BUCKET, "ci")["wheels"][key]["variants"]
    assert variants == ["torch-2.13.0+cpu", "torch-2.14.1+cpu", "torch-2.15.0+cpu"], variants


def test_attest_signs_a_test_result_for_the_retested_bytes_and_no_build_provenance(s3: Any, tmp_path: Path) -> None:
    import base64

    from wheelfoundry.aws.attest import attest_run

    key, sha, _ = published(s3, tmp_path)
    name = key.rsplit("/", 1)[1]
    put(s3, "runs/rt-1/request.json", {"framework": "extension", "retest": [key]})
    manifest = {
        "job_id": TEST["id"],
        "kind": "test",
        "wheels": [{"name": name, "sha256": sha, "tested_cells": [NEW["id"]]}],
    }
    put(s3, f"{TEST['prefix']}manifest.json", manifest)
    put(s3, f"{TEST['prefix']}result.json", {"collect": {"published": [], "unchanged": [name], "extended": [name]}})
    run = {"id": "rt-1", "bucket": BUCKET, "channel": "ci"}
    execution = "arn:aws:states:us-east-1:123456789012:execution:wf-build:rt-1"
    out = attest_run(
        {"run": run, "jobs": [TEST], "build_jobs": [], "execution": execution}, s3, lambda d: b"sig", "k", "wf"
    )
    assert out["signed"] == [] and out["unsigned"] == [name] and out["tested"] == [name]  # built by no run here
    assert not [k["Key"] for k in s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{key}.provenance").get("Contents", [])]
    envelope = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{key}.tests/rt-1.json")["Body"].read())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["predicate"]["passedTests"] == [NEW["id"]] and statement["predicate"]["url"] == execution
    assert statement["subject"] == [{"name": name, "digest": {"sha256": sha}}]
