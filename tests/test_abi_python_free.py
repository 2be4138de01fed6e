"""A stable-ABI package whose wheels are abi3 or py3-none (xFormers, FlashAttention-3: ``cp39-abi3``) is built once
for every Python, once a recorded build of the very same source made such wheels: the oldest Python's build serves
every Python's cells, each tested in its own test job. Merge keeps a build to its own Python where its wheel turns
out to be tied to it after all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.test_abi_stable_request import BASE
from tests.test_merging import BUCKET, TEST, s3, stable_job  # noqa: F401
from wheelfoundry.aws.merging import stage_run
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.planning.calibration import cells_of, proven_python_free
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request
from wheelfoundry.request.stable_wheels import python_free

SOURCE = BASE["source"]["s3"]


def record(free: bool, source: str = SOURCE) -> dict[str, Any]:
    reading = {"stable": True, "floor": "2.10", "source": source, "python_free": free}
    cell = {"cell": "torch2.10.0-cp311-cpu-x86_64", "run": "r1", "cuda": False, "compile_core_hours": 0.1}
    return {"scope": "s", "cells": [{**cell, "serial_hours": 0.01, "abi": reading}]}


def test_a_wheel_name_says_whether_it_serves_every_python() -> None:
    assert python_free("x-1.0-cp39-abi3-manylinux_2_28_x86_64.whl")
    assert python_free("x-1.0+abi213cpu-py3-none-manylinux_2_28_x86_64.whl")
    assert not python_free("x-1.0-cp311-cp311-manylinux_2_28_x86_64.whl") and not python_free("not a wheel")
    cell = "torch2.12.0-cp311-cpu-x86_64"
    stages = [{"name": f"build-{cell}", "group": cell, "status": "succeeded", "seconds": 60, "cpu_seconds": 90}]
    wheels = [{"name": "x-1.0+abi212cpu-cp39-abi3-linux_x86_64.whl", "cell": {"id": cell}, "size": 10}]
    manifest = {"stages": stages, "abi": {cell: {"stable": True, "floor": "2.10"}}, "wheels": wheels}
    (recorded,) = cells_of({"extension": {"cells": [{"id": cell}], "source_s3": SOURCE}, "cuda": None}, manifest,
                           load_config())  # fmt: skip
    assert recorded["abi"]["python_free"] is True
    assert proven_python_free({"cells": [{**recorded, "run": "r9"}]}, SOURCE) == "run r9 made abi3 / py3-none wheels"
    assert proven_python_free(record(False), SOURCE) is None and proven_python_free(record(True), "other") is None


def test_a_recorded_abi3_source_is_built_once_for_every_python_and_tested_in_each() -> None:
    raw = {**BASE, "torch": ["2.10", "2.11"], "cuda": ["cpu", "12.6"], "python": ["3.11", "3.12"], "abi": "stable"}
    request, catalog, config = parse_request(raw, load_catalog(), load_config()), load_catalog(), load_config()
    plain, once = (plan_request(request, catalog, config, record=r) for r in (record(False), record(True)))
    built = {n: [c.id for j in p.jobs for c in j.extension.cells if j.extension] for n, p in (("plain", plain),
             ("once", once))}  # fmt: skip
    assert len(built["plain"]) == 4 and len(built["once"]) == 2  # (cpu, cu12) x Python; (cpu, cu12), Python 3.11
    assert all("-cp311-" in c for c in built["once"])
    assert all(j.extension and j.extension.python_free and len(j.extension.serves) == 4 for j in once.jobs)
    tested = {t.id: sorted(c.id for c in t.extension.cells) for t in once.tests if t.extension}
    assert sorted(t.rsplit("-test-", 1)[1] for t in tested) == ["cp311-x86_64", "cp312-x86_64"], tested
    assert sum(len(v) for v in tested.values()) == 8  # 2 torch x 2 variants x 2 Pythons, each installed and tested
    assert any(
        n.startswith("abi3: one build per CUDA major and platform serves every Python (run r1") for n in once.notes
    )


def test_a_build_planned_for_every_python_whose_wheel_is_tied_to_its_own_serves_only_that(
    s3: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    prefix = "runs/run-1/jobs/my-ext-cpu-x86_64/"
    cell = {"id": "torch2.13.0-cp311-cpu-x86_64", "torch_version": "2.13.0", "python": "3.11", "cuda": None,
            "local_label": "abi213cpu", "build_id": "torch2.13-cpu"}  # fmt: skip
    serves = [cell, {**cell, "id": "torch2.13.0-cp312-cpu-x86_64", "python": "3.12"}]
    # the wheel is my_ext-1.0+abi213cpu-cp311-cp311-...: tied to Python 3.11 after all
    job, _, _ = stable_job(s3, tmp_path / "w", prefix, cell, serves, serves[:1], python_free=True)
    run = {"id": "run-1", "bucket": BUCKET, "channel": "ci", "layout": "auto", "require_all_cells": False}
    out = stage_run({"run": run, "jobs": [job], "test_jobs": [TEST]}, s3, tmp_path)
    assert out["missing_cells"] == ["torch2.13.0-cp312-cpu-x86_64"] and out["status"] == "partial"
    (staged,) = out["wheels"]
    assert staged["cells"] == ["torch2.13.0-cp311-cpu-x86_64"]
    assert json.loads(s3.get_object(Bucket=BUCKET, Key="runs/run-1/merge.json")["Body"].read())["missing_cells"]


def test_one_build_for_every_python_is_of_the_oldest_torch_even_where_an_exclude_leaves_its_python_out() -> None:
    raw = {**BASE, "torch": ["2.10", "2.11"], "cuda": ["cpu"], "python": ["3.11", "3.12"], "abi": "stable",
           "exclude": [{"torch": "2.10", "python": "3.11"}]}  # fmt: skip
    del raw["arch_list"]
    request, catalog, config = parse_request(raw, load_catalog(), load_config()), load_catalog(), load_config()
    (job,) = plan_request(request, catalog, config, record=record(True)).jobs
    assert job.extension is not None
    (built,) = job.extension.cells  # torch 2.10's only Python here is 3.12: the floor serves 2.10 and 2.11
    assert built.id == "torch2.10.0-cp312-cpu-x86_64", built.id
    assert sorted(c.id for c in job.extension.serves) == [
        "torch2.10.0-cp312-cpu-x86_64", "torch2.11.0-cp311-cpu-x86_64", "torch2.11.0-cp312-cpu-x86_64"]  # fmt: skip


def test_an_abi3_tag_serves_its_python_and_every_later_one() -> None:
    from wheelfoundry.request.stable_wheels import serves_python

    assert serves_python("x-1.0-cp39-abi3-linux_x86_64.whl", "3.13") and serves_python("x-1.0-py3-none-any.whl", "3.10")
    assert not serves_python("x-1.0-cp312-abi3-linux_x86_64.whl", "3.11")  # built for 3.12 on: not 3.11
    assert serves_python("x-1.0-cp311-cp311-linux_x86_64.whl", "3.11")
    assert not serves_python("x-1.0-cp311-cp311-linux_x86_64.whl", "3.12")
    assert serves_python("x-1.0-cp310-abi3-linux_x86_64.whl", "3.10")
