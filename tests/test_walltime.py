"""Wall time as a plan output: the layout of extension cells over instances, nvcc threads, calibration."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from wheelfoundry_cli.render import render_plan

from wfbuild.compiling.parallelism import cell_slots, nvcc_threads_env
from wheelfoundry.aws.timing import job_timing, record_cells, report_rows
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import InstanceType, load_config
from wheelfoundry.errors import RequestInvalid
from wheelfoundry.planning import walltime
from wheelfoundry.planning.calibration import cell_cost, cells_of
from wheelfoundry.planning.plan import Plan
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request

ROOT = Path(__file__).resolve().parents[1]
MATRIX = json.loads((ROOT / "bench" / "requests" / "torch-scatter-48.json").read_text())


def plan(wall: float | None = None, config: Any = None, record: Any = None, **raw: Any) -> Plan:
    catalog, config = load_catalog(), config or load_config()
    request = {**MATRIX, **raw} | ({"options": {"max_wall_hours": wall}} if wall is not None else {})
    return plan_request(parse_request(request, catalog, config), catalog, config, record=record)


def test_the_48_cell_matrix_is_fanned_out_to_meet_the_wall_time_and_every_cell_is_built_once() -> None:
    loose, tight = plan(48), plan(0.5)
    assert len(loose.jobs) == 3 and loose.wall_hours > 0.5
    assert tight.wall_hours <= 0.5 < loose.wall_hours and len(tight.jobs) > 3
    assert any(j.id.endswith("-1of3") or j.id.endswith("-1of2") for j in tight.jobs)
    for p in (loose, tight):
        cells = [(j.target, c.id) for j in p.jobs for c in (j.extension.cells if j.extension else ())]
        assert len(cells) == len(set(cells)) == 48
    assert loose.usd <= tight.usd  # the wall target is what costs more, never the default
    assert max(j.estimate.hours for j in tight.jobs) == tight.wall_hours


def test_the_layout_is_the_cheapest_meeting_the_wall_brute_force() -> None:
    config = load_config()
    cost = walltime.CellCost(1.0, 0.05, "test")
    groups = [walltime.options(n, cuda, 6, cost, "x86_64", True, config) for n, cuda in ((8, False), (8, True))]
    for wall in (0.3, 0.6, 1.0, 5.0):
        chosen = walltime.choose_layouts(groups, wall, 10, 250)
        fits = [
            c for c in itertools.product(*groups) if max(o.wall for o in c) <= wall and sum(o.shards for o in c) <= 10
        ]
        if not fits:
            assert not chosen.met
            continue
        assert chosen.met and chosen.wall <= wall
        assert round(sum(o.usd for o in chosen.chosen), 4) == round(min(sum(o.usd for o in c) for c in fits), 4)


def test_an_unreachable_wall_plans_the_fastest_layout_within_the_guardrails_and_says_so() -> None:
    narrow = load_config().with_guardrails(max_jobs=4)
    p = plan(0.25, config=narrow)
    assert len(p.jobs) <= 4
    (note,) = [n for n in p.notes if "cannot be met" in n]
    assert f"the fastest layout takes {p.wall_hours:.2f} h" in note and "max_wall_hours 0.25" in note
    assert "NOT met" in render_plan(p)


def test_plan_shows_wall_time_beside_build_hours_and_dollars() -> None:
    text = render_plan(plan(1))
    assert "estimated wall " in text and "build-hours" in text and "max_wall_hours 1: met" in text
    assert "nvcc --threads" in text  # the notes say how each instance shares its cores


@pytest.mark.parametrize(("value", "why"), [(0, "out of range"), (100, "out of range"), ("1", "wrong type")])
def test_max_wall_hours_is_validated_with_field_value_and_what_is_allowed(value: Any, why: str) -> None:
    with pytest.raises(RequestInvalid) as err:
        parse_request({**MATRIX, "options": {"max_wall_hours": value}}, load_catalog(), load_config())
    (issue,) = err.value.issues
    assert issue.path == "options.max_wall_hours" and issue.value == value and why in issue.message
    if why == "out of range":
        assert issue.allowed == ("0.25 <= value <= 48",)


def test_the_stack_default_applies_when_the_request_names_none() -> None:
    request = parse_request(MATRIX, load_catalog(), load_config())
    assert request.options.max_wall_hours == load_config().max_wall_hours


@pytest.mark.parametrize("vcpus,memory,cells,archs", [(16, 32, 16, 7), (32, 128, 4, 7), (64, 128, 1, 2), (2, 24, 1, 2)])
def test_cells_times_jobs_times_threads_stay_within_cores_and_memory(
    vcpus: int, memory: float, cells: int, archs: int
) -> None:
    config = load_config()
    instance = InstanceType("t", "x86_64", vcpus, memory, 1.0)
    slots = walltime.compile_slots(instance, cells, True, archs, config)
    assert slots.cells * slots.jobs * slots.threads <= vcpus and 1 <= slots.threads <= archs
    need = (
        slots.cells
        * slots.jobs
        * (config.gib_per_compile_job["cuda"] + (slots.threads - 1) * config.gib_per_nvcc_thread)
    )
    assert need <= memory - config.reserve_gib or slots.threads == 1
    # the runner's twin decides the same on a host of that size
    host = cell_slots(vcpus, memory - config.reserve_gib, 4.0, config.gib_per_nvcc_thread, cells, vcpus, archs)
    assert (host.cells, host.threads) == (slots.cells, slots.threads)
    assert walltime.compile_slots(instance, cells, False, archs, config).threads == 1


def test_nvcc_threads_are_appended_to_the_flags_already_there_and_never_override_a_package() -> None:
    base = {"NVCC_APPEND_FLAGS": "-Xcompiler=-ffile-prefix-map=/w=."}
    assert nvcc_threads_env(base, 4) == {"NVCC_APPEND_FLAGS": "-Xcompiler=-ffile-prefix-map=/w=. --threads 4"}
    assert nvcc_threads_env({}, 2) == {"NVCC_APPEND_FLAGS": "--threads 2"}
    assert nvcc_threads_env(base, 1) == {}
    assert nvcc_threads_env({"NVCC_APPEND_FLAGS": "-t 3"}, 4) == {}
    # a package's own --threads also holds where a compile step's .cu file compiles alone
    own = {"NVCC_APPEND_FLAGS": "--threads=3", "WF_NVCC_THREADS_ALONE": "4"}
    assert nvcc_threads_env(own, 2) == {"WF_NVCC_THREADS_ALONE": "1"}
    assert nvcc_threads_env({"WF_NVCC_THREADS_ALONE": "4"}, 2) == {"NVCC_APPEND_FLAGS": "--threads 2"}
    # CUDA >= 13.0: intermediates named after the object, not nvcc's pid (whatever the thread count)
    assert nvcc_threads_env({"CUDA_VERSION": "13.0"}, 1) == {"NVCC_APPEND_FLAGS": "-objtemp"}
    assert nvcc_threads_env({"CUDA_VERSION": "13.0"}, 2) == {"NVCC_APPEND_FLAGS": "--threads 2 -objtemp"}
    assert nvcc_threads_env({"CUDA_VERSION": "12.6"}, 2) == {"NVCC_APPEND_FLAGS": "--threads 2"}
    assert nvcc_threads_env({"CUDA_VERSION": "13.0"}, 2, objtemp=False) == {"NVCC_APPEND_FLAGS": "--threads 2"}


def test_an_extension_cells_thread_count_ends_every_nvcc_command_line_even_at_one() -> None:
    # nvcc keeps the last of a repeated option, and NVCC_APPEND_FLAGS come after the package's own flags:
    # so causal-conv1d's hard-coded --threads 4 gives way to the cell's share of the cores, 1 included
    cuda = {"CUDA_VERSION": "12.6", "NVCC_APPEND_FLAGS": "-Xcompiler=-ffile-prefix-map=/w=."}
    assert nvcc_threads_env(cuda, 1, last_word=True) == {
        "NVCC_APPEND_FLAGS": "-Xcompiler=-ffile-prefix-map=/w=. --threads 1"
    }
    assert nvcc_threads_env(cuda, 3, last_word=True)["NVCC_APPEND_FLAGS"].endswith(" --threads 3")
    assert nvcc_threads_env(cuda, 1) == {}  # a framework build: the catalog's TORCH_NVCC_FLAGS keep theirs
    assert nvcc_threads_env({}, 1, last_word=True) == {}  # a CPU cell: no nvcc
    assert nvcc_threads_env({**cuda, "NVCC_APPEND_FLAGS": "--threads 2"}, 1, last_word=True) == {}  # the job's own


def test_recorded_cells_of_the_same_source_scale_the_model() -> None:
    config = load_config()
    model = cell_cost(True, 7, config)
    assert model.source == "catalog model"
    heavy = {"cells": [{"cuda": True, "archs": 2, "compile_core_hours": 2 * cell_cost(True, 2, config).work,
                        "serial_hours": 0.2}]}  # fmt: skip
    scaled = cell_cost(True, 7, config, heavy)
    assert scaled.work == pytest.approx(2 * model.work, rel=1e-3) and scaled.serial == 0.2
    assert "1 recorded CUDA cell" in scaled.source and cell_cost(False, 1, config, heavy).source == "catalog model"
    liar = {"cells": [{"cuda": True, "archs": 2, "compile_core_hours": 1e9, "serial_hours": 1e9}]}
    assert cell_cost(True, 7, config, liar).work <= 20 * model.work + 1e-6  # a build's claim is clamped
    slower = plan(1, record=heavy)
    assert slower.wall_hours > plan(1).wall_hours or len(slower.jobs) > len(plan(1).jobs)


class FakeS3:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put_object(self, Bucket: str, Key: str, Body: Any) -> None:
        self.objects[Key] = Body.encode() if isinstance(Body, str) else Body

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        if Key not in self.objects:
            raise ClientError({"Error": {"Code": "NoSuchKey"}}, "GetObject")
        return {"Body": _Body(self.objects[Key])}


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self) -> bytes:
        return self.data


def test_after_a_run_each_job_reports_estimated_against_actual_and_its_cells_calibrate_the_next_plan() -> None:
    config = load_config()
    job = next(j for j in plan(1).jobs if j.cuda == "12.6").to_dict()
    cell = job["extension"]["cells"][0]["id"]
    stages = [
        {"name": f"env-{cell}", "group": cell, "status": "succeeded", "seconds": 60, "started_at": 1000.0, "ended_at": 1060.0},
        {"name": f"build-{cell}", "group": cell, "status": "succeeded", "seconds": 1800, "started_at": 1060.0,
         "ended_at": 2860.0},
        {"name": f"smoke-{cell}", "group": cell, "status": "succeeded", "seconds": 30, "started_at": 2860.0,
         "ended_at": 2890.0},
    ]  # fmt: skip
    manifest = {"stages": stages, "parallelism": {"cells_at_once": 1, "max_jobs": 1, "nvcc_threads": 4}}
    timing = job_timing(job, manifest, config)
    assert timing["estimated_hours"] == job["estimate"]["hours"] and timing["actual_hours"] == round(1890 / 3600, 3)
    (row,) = report_rows([{"job_id": job["id"], "timing": timing}])
    assert row["actual/estimated"] == round(timing["actual_hours"] / timing["estimated_hours"], 2)
    (recorded,) = cells_of(job, manifest, config)
    assert recorded["compile_core_hours"] == round(1800 * 4 / 3600, 5) and recorded["archs"] == 7
    s3 = FakeS3()
    run = {"id": "r1", "bucket": "b", "calibration_key": "calibration/x.json"}
    assert record_cells(s3, run, [{"timing": timing}]) == 1
    record = json.loads(s3.objects["calibration/x.json"])
    assert cell_cost(True, 7, config, record).work == pytest.approx(2.0, rel=1e-3)
    assert record_cells(s3, run, [{"timing": timing}]) == 1  # the same run again replaces, never doubles
    assert len(json.loads(s3.objects["calibration/x.json"])["cells"]) == 1


def test_status_shows_the_expected_wall_time_and_each_finished_job_against_its_estimate() -> None:
    from wheelfoundry_user.status import render_status

    job = {"job": "ext-cuda13.0-x86_64", "executor": "ec2", "state": "succeeded", "stage": "done",
           "elapsed_seconds": 2700.0, "estimated_seconds": 1800, "estimated_usd": 0.5, "actual_usd": 0.75,
           "detail": "", "gpu_test": None, "compiler_cache": None}  # fmt: skip
    status = {"run": "r1", "status": "SUCCEEDED", "elapsed_seconds": 3000.0, "estimated_wall_seconds": 2160,
              "estimated_build_hours": 1.2, "estimated_usd": 0.9, "actual_usd": 0.75, "channel": "c", "jobs": [job],
              "error": None, "failures": [], "bucket": "b"}  # fmt: skip
    text = render_status(status)
    assert "elapsed 50m00s of an expected 36m00s wall (1.2 build-hours)" in text
    assert "EXPECTED" in text and "30m00s" in text and "1.50x" in text
    assert "1.50x" not in render_status({**status, "jobs": [{**job, "stage": "build"}]})
