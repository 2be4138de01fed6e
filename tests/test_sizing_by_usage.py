"""Every core pays: a build's measured CPU seconds calibrate the next plan of its source, whose instance is
sized by the cores a cell really kept busy, and plan says how busy it expects the cores to be."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from wheelfoundry_cli.main import main

from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.planning import walltime
from wheelfoundry.planning.calibration import cell_cost, cells_of
from wheelfoundry.planning.plan import Plan
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request

# One CPU cell of a ninja-off package (the PyG way), as a user requests it.
REQUEST = {
    "framework": "extension",
    "name": "torch-spline-conv",
    "source": {"s3": "s3://my-bucket/sources/torch_spline_conv-1.2.2.tar.gz"},
    "torch": ["2.13"],
    "cuda": ["cpu"],
    "python": ["3.11"],
    "options": {"executor": "ec2"},
}


def plan(record: Any = None, **raw: Any) -> Plan:
    catalog, config = load_catalog(), load_config()
    return plan_request(parse_request({**REQUEST, **raw}, catalog, config), catalog, config, record=record)


def manifest_of(cell: str, build_seconds: float, cpu_seconds: float | None, max_jobs: int) -> dict[str, Any]:
    build = {"name": f"build-{cell}", "group": cell, "status": "succeeded", "seconds": build_seconds}
    if cpu_seconds is not None:
        build["cpu_seconds"] = cpu_seconds
    env = {"name": f"env-{cell}", "group": cell, "status": "succeeded", "seconds": 60}
    return {"stages": [env, build], "parallelism": {"cells_at_once": 1, "max_jobs": max_jobs, "nvcc_threads": 1}}


def recorded(width: float, given: int, build_seconds: float = 600.0) -> dict[str, Any]:
    """The calibration record a finished run of REQUEST leaves: one cell that kept ``width`` of ``given`` cores busy."""
    job = plan().jobs[0].to_dict()
    cell = job["extension"]["cells"][0]["id"]
    return {"cells": cells_of(job, manifest_of(cell, build_seconds, width * build_seconds, given), load_config())}


def test_a_measured_cell_records_its_cpu_seconds_width_and_the_cores_it_was_given() -> None:
    job = plan().jobs[0].to_dict()
    cell = job["extension"]["cells"][0]["id"]
    config = load_config()
    (measured,) = cells_of(job, manifest_of(cell, 600.0, 630.0, 16), config)
    assert measured["compile_core_hours"] == round(630 / 3600, 5)  # CPU seconds, not seconds x cores given
    assert (measured["width"], measured["cores"]) == (1.05, 16)
    (old,) = cells_of(job, manifest_of(cell, 600.0, None, 16), config)  # a manifest from before the measurement
    assert "width" not in old and old["compile_core_hours"] == round(600 * 1 / 3600, 5)  # the model's cap: 1 core


def test_a_cell_that_kept_few_of_its_cores_busy_is_planned_at_that_width_one_that_used_them_all_is_not() -> None:
    config = load_config()
    narrow = cell_cost(False, 1, config, recorded(1.6, 16))
    assert narrow.recorded and narrow.width_limit == 1.6 and "kept 1.6 of its 16 cores busy" in narrow.source
    wide = cell_cost(False, 1, config, recorded(15.0, 16))
    assert wide.recorded and wide.width_limit is None  # core-bound: it would use more
    instance = config.instance_types["c7i.4xlarge"]
    assert walltime.compile_slots(instance, 1, False, 1, config, cost=narrow).width == 1.6
    # it would use all 16 cores, but 28 GiB (32 less the 4 reserved) hold 14 compile jobs of the model's 2 GiB
    assert walltime.compile_slots(instance, 1, False, 1, config, cost=wide).width == 14
    assert walltime.compile_slots(instance, 1, False, 1, config).width == 1  # the model: one unit a CPU cell


def test_a_one_cell_ninja_off_job_gets_an_instance_it_can_keep_busy_once_measured_and_plan_says_so() -> None:
    before = plan()
    (job,) = before.jobs
    assert job.instance.vcpus == 16  # no measurement yet: the model cannot tell, and plan says what it expects
    note = next(n for n in before.notes if n.startswith(job.id))
    assert "expected cores busy 0.06 (1 a cell)" in note and "catalog model" in note
    # The run measured the cell: 1.6 cores busy of the 16 it was given (its few translation units).
    after = plan(record=recorded(1.6, 16))
    (sized,) = after.jobs
    assert sized.instance.vcpus == 4 and sized.instance.type == "c7i.xlarge"
    note = next(n for n in after.notes if n.startswith(sized.id))
    assert "expected cores busy 0.40 (1.6 a cell)" in note and "kept 1.6 of its 16 cores busy" in note
    assert sized.estimate.usd < job.estimate.usd
    # A cell that used every core it was given is planned to keep busy whatever it gets.
    wide = plan(record=recorded(15.5, 16, build_seconds=3000))
    assert "expected cores busy 1.00" in next(n for n in wide.notes if n.startswith(wide.jobs[0].id))


def test_many_measured_narrow_cells_share_an_instance_to_keep_its_cores_busy() -> None:
    many = {"torch": ["2.11", "2.12", "2.13", "2.14"], "python": ["3.10", "3.11", "3.12", "3.13"]}
    record = recorded(1.6, 16, build_seconds=1200)
    # 16 cells of 1.6 cores each; a 4-hour wall leaves the planner free to pick on price, which keeps cores busy
    layout = plan(record=record, **many, options={"executor": "ec2", "max_wall_hours": 4})
    config = load_config()
    cost = cell_cost(False, 1, config, record)
    for job in layout.jobs:
        cells = len(job.extension.cells) if job.extension else 0
        instance = config.instance_types[job.instance.type]
        slots = walltime.compile_slots(instance, cells, False, 1, config, cost=cost)
        assert walltime.cores_busy(instance, [cells], [slots]) >= 0.9, (job.instance.type, cells, slots)


def test_plan_on_the_command_line_sizes_by_a_downloaded_record_and_refuses_a_bad_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = tmp_path / "request.json"
    request.write_text(json.dumps(REQUEST))
    record = tmp_path / "calibration.json"
    record.write_text(json.dumps({"scope": "s3://my-bucket/sources/", **recorded(1.6, 16)}))
    assert main(["plan", str(request), "--calibration", str(record)]) == 0
    out = capsys.readouterr().out
    assert "c7i.xlarge" in out and "expected cores busy 0.40 (1.6 a cell)" in out, out
    record.write_text(json.dumps({"scope": "x", "cells": "lots"}))
    assert main(["plan", str(request), "--calibration", str(record)]) == 2
    assert "--calibration" in capsys.readouterr().err
