"""The layout fallback against S3 (moto): a merged wheel that failed the test of its published bytes in a
``layout: auto`` run is the evidence (Attest's MergedWheelFailed); Merge's second call withdraws what the
merged pass published, plans each test job again under its own prefix and stages the cell wheels there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import s3_bucket
from tests.test_merging import BUCKET, TEST, _keys, event, put, stage_job
from wheelfoundry.aws.fallback import evidence, failed_verdict, restage, retest_jobs
from wheelfoundry.aws.merging import stage_run

VERDICT = "PUBLISHED WHEEL FAILED: {wheel} in cell torch2.13.0-cp311-cpu-x86_64: check 'import ext': ImportError: gone"
TEST_JOB = {**TEST, "job_key": f"{TEST['prefix']}job.json"}


@pytest.fixture
def s3() -> Iterator[Any]:
    with s3_bucket(BUCKET) as client:
        yield client


def failed_test(s3: Any, wheel: str, error: str = "BuildFailed", published: list[str] | None = None) -> None:
    """The test job's result.json as record_result leaves it: the runner's cause holds the log tail."""
    if published is not None:  # it passed and published
        put(s3, f"{TEST['prefix']}result.json", {"status": "succeeded", "collect": {"published": published}})
        return
    tail = f"[wfbuild 10:00:01] stage test-torch2.13.0-cp311-cpu-x86_64: failed\n{VERDICT.format(wheel=wheel)}\n"
    cause = json.dumps({"job_id": TEST["id"], "stage": "test-torch2.13.0-cp311-cpu-x86_64", "log_tail": tail})
    put(s3, f"{TEST['prefix']}result.json", {"status": "failed", "error": error, "cause": cause, "collect": {}})


def merged_run(s3: Any, tmp: Path, layout: str = "auto") -> tuple[dict[str, Any], dict[str, Any]]:
    job = stage_job(s3, tmp, ["torch2.13.0-cp311-cpu-x86_64", "torch2.14.1-cp311-cpu-x86_64"])
    ev = {**event(job, layout=layout), "test_jobs": [TEST_JOB]}
    ev["run"]["extension"] = True
    out = stage_run(ev, s3, tmp)
    assert out["layout"] == "merged"
    return ev, out


def attest_event(ev: dict[str, Any], fallback: Any = None) -> dict[str, Any]:
    return {"run": ev["run"], "jobs": [TEST_JOB], "build_jobs": ev["jobs"], "fallback": fallback}


def test_a_failed_import_of_the_merged_wheel_is_the_evidence(s3: Any, tmp_path: Path) -> None:
    ev, out = merged_run(s3, tmp_path)
    wheel = out["wheels"][0]["filename"]
    failed_test(s3, wheel)
    why = evidence(attest_event(ev), s3)
    assert why == f"{TEST['id']}: {wheel} in cell torch2.13.0-cp311-cpu-x86_64: check 'import ext': ImportError: gone"


def test_no_fallback_for_an_explicit_layout_a_second_time_or_another_failure(s3: Any, tmp_path: Path) -> None:
    ev, out = merged_run(s3, tmp_path, layout="merged")
    wheel = out["wheels"][0]["filename"]
    failed_test(s3, wheel)
    assert evidence(attest_event(ev), s3) is None  # the user asked for merged: the run fails
    ev["run"]["layout"] = "auto"
    assert evidence(attest_event(ev), s3) is not None
    assert evidence(attest_event(ev, fallback={"Error": "MergedWheelFailed"}), s3) is None  # once per run
    put(s3, "runs/run-1/fallback.json", {"from": "merged"})
    assert evidence(attest_event(ev), s3) is None
    s3.delete_object(Bucket=BUCKET, Key="runs/run-1/fallback.json")
    failed_test(s3, wheel, error="InstanceLost")  # not the wheel's fault: no layout evidence
    assert evidence(attest_event(ev), s3) is None
    failed_test(s3, wheel, error="", published=[wheel])  # passed
    assert evidence(attest_event(ev), s3) is None


@pytest.mark.parametrize(
    "result",
    [
        {"status": "failed", "error": "BuildFailed", "cause": "not json"},
        {"status": "failed", "error": "BuildFailed", "cause": json.dumps({"log_tail": "error: no verdict here"})},
        {"status": "failed", "error": "GpuTestFailed", "cause": json.dumps({"log_tail": VERDICT})},
    ],
)
def test_what_is_not_a_verdict_on_the_published_bytes(result: dict[str, Any]) -> None:
    assert failed_verdict(result) is None


def test_the_fallback_withdraws_the_merged_pass_and_stages_the_cells_for_new_test_jobs(s3: Any, tmp_path: Path) -> None:
    ev, out = merged_run(s3, tmp_path)
    merged = out["wheels"][0]["filename"]
    channel = f"wheels/ci/my-ext/{merged}"
    put(s3, channel, b"merged bytes")  # a passing test job of the merged pass published it
    put(s3, f"{channel}.metadata", b"Metadata-Version: 2.1\n")
    put(s3, "wheels/ci/my-ext/my_ext-0.9-cp311-cp311-manylinux_2_28_x86_64.whl", b"an earlier run's")
    failed_test(s3, merged, error="", published=[merged])
    cause = json.dumps(
        {"errorMessage": "my-ext-test-cp311-x86_64: ImportError: gone", "errorType": "MergedWheelFailed"}
    )
    second = restage(
        {**ev, "failed_tests": [TEST_JOB], "fallback": {"Error": "MergedWheelFailed", "Cause": cause}}, s3, tmp_path
    )
    assert second["layout"] == "per-cell"
    assert second["layout_reason"].startswith(
        "the merged wheel failed the test of its published bytes (my-ext-test-cp311-x86_64: ImportError: gone)"
    )
    retest = f"{TEST['id']}-per-cell"
    assert [t["id"] for t in second["test_jobs"]] == [retest]
    prefix = f"runs/run-1/jobs/{retest}/"
    assert second["test_jobs"][0]["prefix"] == prefix and second["test_jobs"][0]["job_key"] == f"{prefix}job.json"
    assert sorted(w["filename"].split("-")[1] for w in second["wheels"]) == ["1.0+pt213cpu", "1.0+pt214cpu"]
    assert all(w["key"].startswith(f"{prefix}staged/") for w in second["wheels"])
    contract = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{prefix}job.json")["Body"].read())
    assert contract["id"] == retest and contract["run"]["prefix"] == prefix
    # Only what this run's merged pass created is yanked (PEP 592): its bytes stay, beside the reason; an
    # earlier run's wheel is untouched; the first pass's records stay readable.
    assert _keys(s3, "wheels/ci/") == sorted(
        [
            channel,
            f"{channel}.metadata",
            f"{channel}.yanked",
            "wheels/ci/my-ext/my_ext-0.9-cp311-cp311-manylinux_2_28_x86_64.whl",
        ]
    )
    assert s3.get_object(Bucket=BUCKET, Key=channel)["Body"].read() == b"merged bytes"
    reason = s3.get_object(Bucket=BUCKET, Key=f"{channel}.yanked")["Body"].read().decode()
    # a fixed reason on public pages: the verdict quotes the package's test output, kept in fallback.json
    assert reason == "run run-1: the merged wheel failed the test of its published bytes"
    assert f"{TEST['prefix']}result.json" in _keys(s3, TEST["prefix"])
    record = json.loads(s3.get_object(Bucket=BUCKET, Key="runs/run-1/fallback.json")["Body"].read())
    assert record == {
        "from": "merged",
        "to": "per-cell",
        "why": "my-ext-test-cp311-x86_64: ImportError: gone",
        "tests": [TEST["id"]],
        "withdrawn": [channel],
        "retests": [retest],
    }
    merge_json = json.loads(s3.get_object(Bucket=BUCKET, Key="runs/run-1/merge.json")["Body"].read())
    assert merge_json["fallback"] == record and merge_json["layout"] == "per-cell"
    assert evidence(attest_event(ev), s3) is None  # the marker: never a second fallback


def test_a_retest_is_not_planned_again(s3: Any) -> None:
    with pytest.raises(ValueError, match="already a per-cell retest"):
        retest_jobs(s3, {"id": "run-1", "bucket": BUCKET}, [{**TEST_JOB, "id": "x-test-cp311-x86_64-per-cell"}])
    with pytest.raises(ValueError, match="the test job's contract is missing"):
        retest_jobs(s3, {"id": "run-1", "bucket": BUCKET}, [{**TEST_JOB, "job_key": "runs/run-1/jobs/none/job.json"}])
