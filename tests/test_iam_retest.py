"""What a retest (request.retest) needs of the stack's IAM, checked against the shipped template's policies with
the project's policy evaluator (the embedded AWS runs handlers without enforcing their roles)."""

from __future__ import annotations

from tests.test_iam_matrix import BUCKET
from tests.test_iam_toolkits import allowed

WHEEL = f"{BUCKET}/wheels/ci/wf-stable/wf_stable-0.1.0+abi213cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


def test_validate_reads_the_channel_index_and_merge_reads_the_published_wheel() -> None:
    assert "ValidateFunction" in allowed("s3:GetObject", f"{BUCKET}/simple/ci/.index-state.json")
    readers = allowed("s3:GetObject", WHEEL)
    assert "MergeFunction" in readers and not readers & {"ExtensionJobRole", "FrameworkJobRole"}


def test_collect_copies_a_version_and_attest_writes_only_signed_records_beside_a_wheel() -> None:
    assert "CollectFunction" in allowed("s3:GetObjectVersion", WHEEL)
    assert "CollectFunction" in allowed("s3:GetObjectVersion", f"{BUCKET}/runs/r1/jobs/j/wheels/x.whl")
    assert "AttestFunction" in allowed("s3:PutObject", f"{WHEEL}.tests/w-run-1.json")
    assert "AttestFunction" not in allowed("s3:PutObject", WHEEL)  # it signs; it never writes a wheel
    assert "MergeFunction" not in allowed("s3:PutObject", WHEEL)  # it stages into runs/; only Collect publishes
