"""One abi3 wheel staged for two Pythons' test jobs (moto's S3): published only once both passed, with both jobs'
variants; while one has not passed (or failed), not at all."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import s3_bucket
from wheelfoundry.aws.results import collect
from wheelfoundry.aws.shared_wheels import sharing

BUCKET = "wf-bucket"
NAME = "my_ext-1.0+abi213cpu-cp39-abi3-manylinux_2_28_x86_64.whl"
BODY = b"PK abi3 wheel bytes"
SHA = hashlib.sha256(BODY).hexdigest()
RUN = {"id": "run-1", "bucket": BUCKET, "channel": "ci", "layout": "per-cell"}
DEST = f"wheels/ci/my-ext/{NAME}"


def job(py: str) -> dict[str, Any]:
    return {"id": f"my-ext-test-cp{py}-x86_64", "kind": "test", "prefix": f"runs/run-1/jobs/my-ext-test-cp{py}-x86_64/"}


def put(s3: Any, key: str, body: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key=key, Body=body if isinstance(body, bytes) else json.dumps(body).encode())


@pytest.fixture
def s3() -> Iterator[Any]:
    with s3_bucket(BUCKET) as client:
        staged = []
        for py in ("311", "312"):
            test = job(py)
            put(client, f"{test['prefix']}job.json", {"kind": "test", "packages": [{"name": "my-ext"}]})
            put(client, f"{test['prefix']}wheels/{NAME}", BODY)
            put(
                client,
                f"{test['prefix']}manifest.json",
                {"job_id": test["id"], "wheels": [{"name": NAME, "sha256": SHA}]},
            )
            staged.append({"filename": NAME, "sha256": SHA, "test_job": test["id"],
                           "variants": ["torch-2.13.0+cpu", "torch-2.14.1+cpu"] if py == "311" else ["torch-2.14.1+cpu", "torch-2.15.0+cpu"]})  # fmt: skip
        put(client, "runs/run-1/merge.json", {"wheels": staged})
        yield client


def publish(s3: Any, py: str) -> dict[str, Any]:
    test = job(py)
    wheel = {"filename": NAME, "key": f"{test['prefix']}wheels/{NAME}", "sha256": SHA}
    return collect({"job": test, "run": RUN, "build": {"wheels": [wheel]}}, s3)


def test_the_last_of_its_test_jobs_to_pass_publishes_it_with_every_variant(s3: Any) -> None:
    first = publish(s3, "311")
    assert first["published"] == [] and first["awaiting"] == [
        f"{NAME}: also staged for my-ext-test-cp312-x86_64, not passed yet"
    ]
    with pytest.raises(s3.exceptions.ClientError):
        s3.head_object(Bucket=BUCKET, Key=DEST)  # one Python passed, the other not yet: not published
    last = publish(s3, "312")
    assert last["published"] == [NAME] and last["awaiting"] == []
    variants = s3.head_object(Bucket=BUCKET, Key=DEST)["Metadata"]["wf-variants"]
    assert variants == "torch-2.13.0+cpu,torch-2.14.1+cpu,torch-2.15.0+cpu"


def test_a_wheel_one_test_job_failed_is_published_for_no_python(s3: Any) -> None:
    assert publish(s3, "311")["awaiting"]  # cp312's test failed: its Collect never runs, nothing is published
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix="wheels/").get("KeyCount") == 0


def test_sharing_names_only_wheels_staged_for_more_than_one_job() -> None:
    merged = [{"filename": "a.whl", "test_job": "t1", "variants": ["torch-2.14.1+cpu"]},
              {"filename": "a.whl", "test_job": "t2", "variants": ["torch-2.13.0+cpu"]},
              {"filename": "b.whl", "test_job": "t1", "variants": []}]  # fmt: skip
    assert sharing(merged) == {"a.whl": {"jobs": ["t1", "t2"], "variants": ["torch-2.13.0+cpu", "torch-2.14.1+cpu"]}}
