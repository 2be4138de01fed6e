"""The Merge step against S3 (moto): the layout it chooses, what it stages for the test jobs (never the
channel), missing cells, require_all_cells, tampered bytes; Collect of a test job publishes only what Merge staged."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import s3_bucket
from tests.test_merge import cell_wheel
from wheelfoundry.aws.merging import choose_layout, stage_run
from wheelfoundry.aws.report import report
from wheelfoundry.aws.results import collect
from wheelfoundry.errors import JobsFailed, ManifestInvalid

BUCKET = "wf-bucket"
CELLS = {
    "torch2.13.0-cp311-cpu-x86_64": ("2.13.0", "torch2.13-cpu", "pt213cpu"),
    "torch2.14.1-cp311-cpu-x86_64": ("2.14.1", "torch2.14-cpu", "pt214cpu"),
}


def put(s3: Any, key: str, body: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key=key, Body=body if isinstance(body, bytes) else json.dumps(body).encode())


TEST = {"id": "my-ext-test-cp311-x86_64", "kind": "test", "prefix": "runs/run-1/jobs/my-ext-test-cp311-x86_64/"}


def stage_job(s3: Any, tmp: Path, built: list[str], status: str = "succeeded", **files: bytes) -> dict[str, Any]:
    """A packed CPU job as Validate and the runner leave it in S3, with wheels for the ``built`` cells."""
    prefix = "runs/run-1/jobs/my-ext-cpu-x86_64/"
    cells = [
        {"id": cid, "torch_version": tv, "python": "3.11", "local_label": label, "build_id": bid}
        for cid, (tv, bid, label) in CELLS.items()
    ]
    put(s3, f"{prefix}job.json", {"platform": "x86_64", "cuda": None, "extension": {"name": "my-ext", "cells": cells}})
    put(s3, f"{TEST['prefix']}job.json", {"kind": "test", "extension": {"name": "my-ext", "cells": cells}})
    put(s3, f"{prefix}result.json", {"status": status})
    wheels = []
    for cid in built:
        label = CELLS[cid][2]
        path = cell_wheel(tmp / cid, label, **files)
        data = path.read_bytes()
        put(s3, f"{prefix}wheels/{path.name}", data)
        wheels.append(
            {"name": path.name, "sha256": hashlib.sha256(data).hexdigest(), "smoke": "passed", "cell": {"id": cid}}
        )
    put(s3, f"{prefix}manifest.json", {"wheels": wheels})
    return {"id": "my-ext-cpu-x86_64", "kind": "extension", "prefix": prefix}


@pytest.fixture
def s3() -> Iterator[Any]:
    with s3_bucket(BUCKET) as client:
        yield client


def event(job: dict[str, Any], require_all: bool = False, layout: str = "auto") -> dict[str, Any]:
    run = {"id": "run-1", "bucket": BUCKET, "channel": "ci", "layout": layout, "require_all_cells": require_all}
    return {"run": run, "jobs": [job], "test_jobs": [TEST]}


def _keys(s3: Any, prefix: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])]


def test_a_missing_cell_is_named_and_the_rest_is_staged_for_the_test_job_not_published(s3: Any, tmp_path: Path) -> None:
    job = stage_job(s3, tmp_path, ["torch2.14.1-cp311-cpu-x86_64"], status="partial")
    out = stage_run(event(job), s3, tmp_path)
    assert out["status"] == "partial" and out["missing_cells"] == ["torch2.13.0-cp311-cpu-x86_64"]
    assert out["layout"] == "merged" and "Python extension module" in out["layout_reason"]
    (wheel,) = out["wheels"]
    assert wheel["key"] == f"{TEST['prefix']}staged/{wheel['filename']}" and wheel["variants"] == ["torch-2.14.1+cpu"]
    body = s3.get_object(Bucket=BUCKET, Key=wheel["key"])["Body"].read()
    assert hashlib.sha256(body).hexdigest() == wheel["sha256"]
    assert _keys(s3, "wheels/") == []  # nothing reaches the channel before the test job passed it
    staged = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{TEST['prefix']}staged.json")["Body"].read())
    assert staged == [wheel] and wheel["cells"] == ["torch2.14.1-cp311-cpu-x86_64"]
    assert out["test_jobs"] == [TEST]
    assert json.loads(s3.get_object(Bucket=BUCKET, Key="runs/run-1/merge.json")["Body"].read()) == out
    # The same cells again: the same bytes (a re-run stages exactly what was tested).
    assert stage_run(event(job), s3, tmp_path)["wheels"][0]["sha256"] == wheel["sha256"]


def test_require_all_cells_stages_nothing_and_report_fails_the_run(s3: Any, tmp_path: Path) -> None:
    job = stage_job(s3, tmp_path, ["torch2.14.1-cp311-cpu-x86_64"], status="partial")
    out = stage_run(event(job, require_all=True), s3, tmp_path)
    assert out["status"] == "failed" and out["wheels"] == [] and out["test_jobs"] == []
    assert _keys(s3, "wheels/") == [] and _keys(s3, f"{TEST['prefix']}staged") == []
    results = [{"job_id": job["id"], "status": "succeeded", "published": 0}]
    event_ = {"run": event(job)["run"], "build_jobs": [job], "build_results": results, "merge": out}
    with pytest.raises(JobsFailed, match=r"NothingPublished: require_all_cells: 1 cell\(s\) did not build.*torch2\.13"):
        report(event_, s3)


def test_all_cells_built_is_a_clean_merge(s3: Any, tmp_path: Path) -> None:
    job = stage_job(s3, tmp_path, list(CELLS))
    out = stage_run(event(job, require_all=True), s3, tmp_path)
    assert out["status"] == "succeeded" and out["missing_cells"] == []
    assert out["wheels"][0]["builds"] == ["torch2.13-cpu", "torch2.14-cpu"]
    assert out["wheels"][0]["variants"] == ["torch-2.13.0+cpu", "torch-2.14.1+cpu"]


def test_a_library_loaded_by_path_makes_auto_per_cell_and_merged_refused(s3: Any, tmp_path: Path) -> None:
    job = stage_job(s3, tmp_path, list(CELLS), **{"ext___version_cpu.so": b"ELF by path"})
    out = stage_run(event(job), s3, tmp_path)
    assert out["layout"] == "per-cell"
    assert out["layout_reason"].startswith("ext/_version_cpu.so is a shared library the package loads by path")
    assert sorted(w["filename"].split("-")[1] for w in out["wheels"]) == ["1.0+pt213cpu", "1.0+pt214cpu"]
    assert [w["variants"] for w in out["wheels"]] == [["torch-2.13.0+cpu"], ["torch-2.14.1+cpu"]]
    refused = stage_run(event(job, layout="merged"), s3, tmp_path)
    assert refused["status"] == "failed" and refused["test_jobs"] == [] and refused["wheels"] == []
    assert "layout 'merged' cannot serve this package: ext/_version_cpu.so" in refused["error"]


@pytest.mark.parametrize(
    ("files", "layout"),
    [
        (["pkg/_C.cpython-311-x86_64-linux-gnu.so", "pkg/__init__.py"], "merged"),
        (["pkg/_C.abi3.so", "pkg.libs/libgomp-a34b3233.so.1"], "merged"),  # auditwheel's grafts follow $ORIGIN
        (["pkg/_C.cpython-311-x86_64-linux-gnu.so", "pkg/_version_cuda.so"], "per-cell"),  # PyG's
        (["pkg/lib/libkernels.so.2"], "per-cell"),  # a ctypes.CDLL target
    ],
)
def test_the_layout_auto_chooses(files: list[str], layout: str) -> None:
    assert choose_layout("auto", files)[0] == layout
    assert choose_layout("per-cell", files)[0] == "per-cell"


def test_bytes_that_differ_from_the_manifest_are_refused(s3: Any, tmp_path: Path) -> None:
    job = stage_job(s3, tmp_path, list(CELLS))
    manifest = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{job['prefix']}manifest.json")["Body"].read())
    put(s3, f"{job['prefix']}wheels/{manifest['wheels'][0]['name']}", b"PK tampered after the build")
    out = stage_run(event(job), s3, tmp_path)
    assert out["status"] == "failed" and "its bytes hash to" in out["error"] and out["test_jobs"] == []


def test_a_test_job_publishes_only_the_bytes_merge_staged(s3: Any, tmp_path: Path) -> None:
    """The test host runs the package's code and can write its prefix: Collect trusts merge.json, not it."""
    job = stage_job(s3, tmp_path, list(CELLS))
    (staged,) = stage_run(event(job), s3, tmp_path)["wheels"]
    name, body = staged["filename"], s3.get_object(Bucket=BUCKET, Key=staged["key"])["Body"].read()
    put(s3, f"{TEST['prefix']}job.json", {"packages": [{"name": "my-ext"}]})
    put(s3, f"{TEST['prefix']}wheels/{name}", body)
    entry = {"name": name, "sha256": staged["sha256"]}
    put(s3, f"{TEST['prefix']}manifest.json", {"job_id": TEST["id"], "wheels": [entry]})
    wheel = {"filename": name, "key": f"{TEST['prefix']}wheels/{name}", "sha256": staged["sha256"]}
    run = event(job)["run"]
    out = collect({"job": TEST, "run": run, "build": {"wheels": [wheel]}}, s3)
    assert out["published"] == [name]
    head = s3.head_object(Bucket=BUCKET, Key=f"wheels/ci/my-ext/{name}")
    assert head["Metadata"]["wf-variants"] == "torch-2.13.0+cpu,torch-2.14.1+cpu"
    # Other bytes, however consistent the test host made its own manifest: refused.
    other = b"PK other bytes"
    put(s3, f"{TEST['prefix']}wheels/{name}", other)
    forged = {**wheel, "sha256": hashlib.sha256(other).hexdigest()}
    put(s3, f"{TEST['prefix']}manifest.json", {"job_id": TEST["id"], "wheels": [{**entry, "sha256": forged["sha256"]}]})
    with pytest.raises(ManifestInvalid, match="is not a wheel Merge staged for this test"):
        collect({"job": TEST, "run": run, "build": {"wheels": [forged]}}, s3)


def stable_job(
    s3: Any,
    folder: Path,
    prefix: str,
    built: dict[str, Any],
    serves: list[dict[str, Any]],
    tested: list[dict[str, Any]],
    **contract: Any,
) -> tuple[dict[str, Any], dict[str, Any], Path]:
    """An abi "stable" job as Validate and the runner leave it: ``built``'s wheel (labelled as the cell says),
    serving ``serves``; the test job's contract holds ``tested``. (job, its manifest's wheel, the wheel)."""
    ext = {"cells": [built], "serves": serves, "abi": "stable", "name": "my-ext", **contract}
    put(s3, f"{prefix}job.json", {"platform": "x86_64", "cuda": None, "extension": ext})
    put(s3, f"{TEST['prefix']}job.json", {"kind": "test", "extension": {"name": "my-ext", "cells": tested}})
    put(s3, f"{prefix}result.json", {"status": "succeeded"})
    path = cell_wheel(folder, built["local_label"])
    data = path.read_bytes()
    put(s3, f"{prefix}wheels/{path.name}", data)
    wheel = {"name": path.name, "sha256": hashlib.sha256(data).hexdigest(), "smoke": "passed",
             "cell": {"id": built["id"]}}  # fmt: skip
    put(s3, f"{prefix}manifest.json", {"wheels": [wheel]})
    return {"id": prefix.split("/")[3], "kind": "extension", "prefix": prefix}, wheel, path


def test_a_stable_wheel_is_staged_once_for_every_torch_it_serves(s3: Any, tmp_path: Path) -> None:
    # abi "stable": the job built only the oldest torch's cell; its wheel serves 2.13 and 2.14 of its Python, each a
    # cell of the test job, which installs and tests it in both before anything is published
    prefix = "runs/run-1/jobs/my-ext-cpu-x86_64/"
    serves = [
        {"id": cid, "torch_version": tv, "python": "3.11", "local_label": label, "build_id": bid, "cuda": None}
        for cid, (tv, bid, label) in CELLS.items()
    ]
    built = {**serves[0], "local_label": "cpu"}
    job, wheel, path = stable_job(s3, tmp_path / "stable", prefix, built, serves, serves, abi_oldest="2.13")
    out = stage_run(event(job, layout="auto"), s3, tmp_path)
    assert out["status"] == "succeeded" and out["missing_cells"] == []  # the served cells were never built
    assert out["layout"] == "per-cell" and out["layout_reason"].startswith("abi stable: one wheel per CUDA major")
    (staged,) = out["wheels"]
    assert staged["sha256"] == wheel["sha256"] and staged["filename"] == path.name  # the built bytes, not rewritten
    assert staged["cells"] == list(CELLS) and staged["variants"] == ["torch-2.13.0+cpu", "torch-2.14.1+cpu"]
    assert staged["test_job"] == TEST["id"] and _keys(s3, "wheels/") == []


def test_an_abi3_wheel_every_python_built_is_staged_once_from_the_oldest_python_for_each_test_job(
    s3: Any, tmp_path: Path
) -> None:
    # abi "stable", Pythons 3.11 and 3.12: each Python's build made a cp39-abi3 wheel of one name
    tests = {py: {**TEST, "id": f"my-ext-test-cp{py}-x86_64", "prefix": f"runs/run-1/jobs/my-ext-test-cp{py}-x86_64/"}
             for py in ("311", "312")}  # fmt: skip
    jobs, bodies = [], {}
    for py in ("3.12", "3.11"):
        tag = py.replace(".", "")
        prefix = f"runs/run-1/jobs/my-ext-cpu-cp{tag}-x86_64/"
        cell = {"id": f"torch2.13.0-cp{tag}-cpu-x86_64", "torch_version": "2.13.0", "python": py, "cuda": None,
                "local_label": "abi213cpu", "build_id": f"torch2.13-cpu-cp{tag}"}  # fmt: skip
        serves = [cell, {**cell, "id": f"torch2.14.1-cp{tag}-cpu-x86_64", "torch_version": "2.14.1"}]
        contract = {"cells": [cell], "serves": serves, "abi": "stable", "name": "my-ext"}
        put(s3, f"{prefix}job.json", {"platform": "x86_64", "cuda": None, "extension": contract})
        put(s3, f"{tests[tag]['prefix']}job.json", {"kind": "test", "extension": {"name": "my-ext", "cells": serves}})
        put(s3, f"{prefix}result.json", {"status": "succeeded"})
        path = cell_wheel(tmp_path / tag, "abi213cpu")
        path = path.rename(path.with_name("my_ext-1.0+abi213cpu-cp39-abi3-manylinux_2_28_x86_64.whl"))
        bodies[py] = data = path.read_bytes() + tag.encode()  # the two builds' bytes differ
        put(s3, f"{prefix}wheels/{path.name}", data)
        wheel = {"name": path.name, "sha256": hashlib.sha256(data).hexdigest(), "smoke": "passed",
                 "cell": {"id": cell["id"]}}  # fmt: skip
        put(s3, f"{prefix}manifest.json", {"wheels": [wheel]})
        jobs.append({"id": f"my-ext-cpu-cp{tag}-x86_64", "kind": "extension", "prefix": prefix})
    run = {"id": "run-1", "bucket": BUCKET, "channel": "ci", "layout": "auto", "require_all_cells": False}
    out = stage_run({"run": run, "jobs": jobs, "test_jobs": list(tests.values())}, s3, tmp_path)
    assert out["status"] == "succeeded" and out["missing_cells"] == []
    oldest = hashlib.sha256(bodies["3.11"]).hexdigest()
    staged = {w["test_job"]: w for w in out["wheels"]}
    assert set(staged) == {t["id"] for t in tests.values()}
    assert {w["sha256"] for w in staged.values()} == {oldest}  # one name, one set of bytes: Python 3.11's build
    assert staged["my-ext-test-cp312-x86_64"]["cells"] == [
        "torch2.13.0-cp312-cpu-x86_64",
        "torch2.14.1-cp312-cpu-x86_64",
    ]
    assert staged["my-ext-test-cp311-x86_64"]["builds"] == ["torch2.13-cpu-cp311"]
    assert staged["my-ext-test-cp311-x86_64"]["same_name_builds"] == ["torch2.13-cpu-cp312"]
