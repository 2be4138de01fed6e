"""The Merge step against S3 (moto): missing cells, require_all_cells, tampered bytes, re-runs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.test_merge import cell_wheel
from wheelfoundry.aws.merging import merge_run
from wheelfoundry.aws.report import report
from wheelfoundry.errors import JobsFailed
from wheelfoundry.merge import MergeConflict

BUCKET = "wf-bucket"
CELLS = {
    "torch2.13.0-cp311-cpu-x86_64": ("2.13.0", "torch2.13-cpu", "pt213cpu"),
    "torch2.14.1-cp311-cpu-x86_64": ("2.14.1", "torch2.14-cpu", "pt214cpu"),
}


def put(s3: Any, key: str, body: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key=key, Body=body if isinstance(body, bytes) else json.dumps(body).encode())


def stage_job(s3: Any, tmp: Path, built: list[str], status: str = "succeeded") -> dict[str, Any]:
    """A packed CPU job as Validate and the runner leave it in S3, with wheels for the ``built`` cells."""
    prefix = "runs/run-1/jobs/my-ext-cpu-x86_64/"
    cells = [
        {"id": cid, "torch_version": tv, "python": "3.11", "local_label": label, "build_id": bid}
        for cid, (tv, bid, label) in CELLS.items()
    ]
    put(s3, f"{prefix}job.json", {"platform": "x86_64", "cuda": None, "extension": {"name": "my-ext", "cells": cells}})
    put(s3, f"{prefix}result.json", {"status": status})
    wheels = []
    for cid in built:
        label = CELLS[cid][2]
        path = cell_wheel(tmp / cid, label)
        data = path.read_bytes()
        put(s3, f"{prefix}wheels/{path.name}", data)
        wheels.append(
            {"name": path.name, "sha256": hashlib.sha256(data).hexdigest(), "smoke": "passed", "cell": {"id": cid}}
        )
    put(s3, f"{prefix}manifest.json", {"wheels": wheels})
    return {"id": "my-ext-cpu-x86_64", "prefix": prefix}


@pytest.fixture
def s3() -> Any:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def event(job: dict[str, Any], require_all: bool = False) -> dict[str, Any]:
    run = {"id": "run-1", "bucket": BUCKET, "channel": "ci", "layout": "merged", "require_all_cells": require_all}
    return {"run": run, "jobs": [job]}


def test_a_missing_cell_is_named_and_the_rest_is_merged_and_published(s3: Any, tmp_path: Path) -> None:
    job = stage_job(s3, tmp_path, ["torch2.14.1-cp311-cpu-x86_64"], status="partial")
    out = merge_run(event(job), s3, tmp_path)
    assert out["status"] == "partial" and out["missing_cells"] == ["torch2.13.0-cp311-cpu-x86_64"]
    (name,) = out["published"]
    key = f"wheels/ci/my-ext/{name}"
    head = s3.head_object(Bucket=BUCKET, Key=key)
    assert (
        head["Metadata"]["sha256"] == hashlib.sha256(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()).hexdigest()
    )
    meta = s3.get_object(Bucket=BUCKET, Key=f"{key}.metadata")
    assert b"Requires-Dist: torch>=2.14,<2.15" in meta["Body"].read()
    assert json.loads(s3.get_object(Bucket=BUCKET, Key="runs/run-1/merge.json")["Body"].read()) == out
    # The same cells again: the same bytes, so the wheel is unchanged rather than a conflict.
    again = merge_run(event(job), s3, tmp_path)
    assert again["unchanged"] == [name] and again["published"] == again["conflicts"] == []


def test_require_all_cells_publishes_nothing_and_report_fails_the_run(s3: Any, tmp_path: Path) -> None:
    job = stage_job(s3, tmp_path, ["torch2.14.1-cp311-cpu-x86_64"], status="partial")
    out = merge_run(event(job, require_all=True), s3, tmp_path)
    assert out["status"] == "failed" and out["published"] == []
    assert not s3.list_objects_v2(Bucket=BUCKET, Prefix="wheels/").get("Contents")
    results = [{"job_id": job["id"], "status": "succeeded", "published": 0}]
    with pytest.raises(JobsFailed, match=r"CellsMissing: require_all_cells: nothing merged.*torch2\.13\.0-cp311"):
        report({"run": event(job)["run"], "jobs": [job], "results": results, "merge": out}, s3)


def test_all_cells_built_is_a_clean_merge(s3: Any, tmp_path: Path) -> None:
    job = stage_job(s3, tmp_path, list(CELLS))
    out = merge_run(event(job, require_all=True), s3, tmp_path)
    assert out["status"] == "succeeded" and out["missing_cells"] == []
    assert out["wheels"][0]["builds"] == ["torch2.13-cpu", "torch2.14-cpu"]


def test_bytes_that_differ_from_the_manifest_are_refused(s3: Any, tmp_path: Path) -> None:
    job = stage_job(s3, tmp_path, list(CELLS))
    manifest = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{job['prefix']}manifest.json")["Body"].read())
    put(s3, f"{job['prefix']}wheels/{manifest['wheels'][0]['name']}", b"PK tampered after the build")
    with pytest.raises(MergeConflict, match="its bytes hash to"):
        merge_run(event(job), s3, tmp_path)
