"""Memory in the plan: a source's recorded peak per compiler sizes its compilers at once and its instances,
its recorded wheel sizes its cells' wheels, and a job that ran out of memory (or time) is relaunched once
on a larger instance, with a launch token of its own (the runner's side: tests/buildspecs/
test_compile_memory.py and test_memory_limits.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers import asl
from tests.test_instances import NOW, RUNNING, aws, event, live  # noqa: F401
from wheelfoundry.aws import tags as T
from wheelfoundry.aws.instances import client_token, launch
from wheelfoundry.aws.runs import job_summary
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.planning import walltime
from wheelfoundry.planning.calibration import cell_cost, cells_of
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request

REQUEST: dict[str, Any] = {
    "framework": "extension",
    "name": "heavy-ext",
    "source": {"s3": "s3://wf-sources/sources/heavy_ext-1.0.tar.gz"},
    "torch": ["2.13"],
    "cuda": ["13.0"],
    "python": ["3.12"],
    "arch_list": "8.0;9.0",
    "options": {"executor": "ec2"},
}
CELL = "torch2.13.0-cp312-cuda13.0-x86_64"


def _contract() -> dict[str, Any]:
    (job,) = plan_request(parse_request(REQUEST), load_catalog(), load_config()).jobs
    return job.to_dict()


def _manifest(peaks: list[tuple[str, float | None, float | None]], size: int = 60_000_000) -> dict[str, Any]:
    """A finished job's manifest: its build stage's attempts (status, the watch's peak, an OOM's peak; MiB)."""
    stages = [{"name": f"env-{CELL}", "group": CELL, "status": "succeeded", "seconds": 30.0}]
    for status, peak, killed in peaks:
        stage: dict[str, Any] = {"name": f"build-{CELL}", "group": CELL, "status": status, "seconds": 600.0}
        stage |= {"cpu_seconds": 1100.0} if status == "succeeded" else {}
        stage |= {"memory": {"peak_unit_mib": peak}} if peak is not None else {}
        stage |= {"oom": {"peak_mib": killed, "unit": "csrc/bwd.cu"}} if killed is not None else {}
        stages.append(stage)
    wheel = {
        "name": "heavy_ext-1.0+pt213cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
        "size": size,
        "cell": {"id": CELL},
    }
    return {"stages": stages, "wheels": [wheel], "parallelism": {"max_jobs": 2, "nvcc_threads": 2}}


def _record(manifest: dict[str, Any]) -> dict[str, Any]:
    return {"scope": "s", "cells": cells_of(_contract(), manifest, load_config())}


def test_a_cells_record_keeps_its_largest_compiler_over_every_attempt_and_its_wheels_size() -> None:
    # an attempt OOM-killed at 6900 MiB, retried with fewer compilers, whose largest then peaked at 6100
    (cell,) = _record(_manifest([("retried", 5000.0, 6900.0), ("succeeded", 6100.0, None)]))["cells"]
    assert cell["peak_gib"] == round(6900 / 1024, 3) and cell["wheel_bytes"] == 60_000_000
    assert cell["serial_hours"] == round(30 / 3600, 5), "the retried attempt compiled: it is not serial time"
    (old,) = _record(_manifest([("succeeded", None, None)]))["cells"]  # a manifest from before the watch
    assert "peak_gib" not in old


def test_the_recorded_peak_sizes_compilers_and_the_wheel_scales_with_the_architectures() -> None:
    config = load_config()
    model = cell_cost(True, 2, config)
    assert model.peak_gib is None and model.gib_per_compiler(True, config) == (4.0, 1.0)  # config.toml's model
    record = _record(_manifest([("succeeded", 5427.0, None)]))  # 5.3 GiB: a flash-attention kernel's cicc
    cost = cell_cost(True, 4, config, record)
    assert cost.peak_gib == 5.3 and cost.gib_per_compiler(True, config) == (6.36, 6.36)
    assert cost.wheel_bytes == 120_000_000, "60 MB for 2 architectures: 120 MB for 4"
    c7i = config.instance_types["c7i.4xlarge"]  # 16 vCPUs, 32 GiB: 28 for compilers
    before, after = (walltime.compile_slots(c7i, 1, True, 4, config, cost=c) for c in (model, cost))
    assert before.jobs * before.threads > 4
    assert after.jobs * after.threads <= 4, "28 GiB hold four 6.36 GiB compilers, whatever the cores"
    huge = cell_cost(True, 2, config, _record(_manifest([("succeeded", 40_000.0, None)])))
    names = {o.instance.name for o in walltime.options(1, True, 2, huge, "x86_64", True, config)}
    assert names == {"c7i.8xlarge", "m7i.8xlarge", "c7i.16xlarge"}, "c7i.4xlarge cannot hold one 47 GiB compiler"


def test_the_plan_passes_the_recorded_memory_to_the_runner_and_says_where_it_came_from() -> None:
    config = load_config()
    record = _record(_manifest([("succeeded", 5427.0, None)]))
    plan = plan_request(parse_request(REQUEST), load_catalog(), config, record=record)
    (job,) = plan.jobs
    assert job.env["WF_GIB_PER_COMPILE_JOB"] == job.env["WF_GIB_PER_NVCC_THREAD"] == "6.36"
    spare = job.instance.memory_gib - config.reserve_gib
    assert int(job.env["MAX_JOBS"]) == min(job.instance.vcpus, int(spare // 6.36))
    note = next(n for n in plan.notes if n.startswith(job.id))
    assert "memory 6.36 GiB a compiler (5.3 GiB, the largest compiler a recorded run of this source ran)" in note
    assert "a cell wheel ~60 MB (recorded)" in note
    first = plan_request(parse_request(REQUEST), load_catalog(), config)
    assert "memory 4 GiB a compiler (the model's: no run of this source has measured it yet)" in next(
        n for n in first.notes if "memory" in n
    )


def test_an_ec2_job_carries_its_larger_instance_and_the_state_machine_relaunches_it_once() -> None:
    (job,) = plan_request(parse_request(REQUEST), load_catalog(), load_config()).jobs
    assert job.retry_instance is not None and job.retry_instance.memory_gib >= 2 * job.instance.memory_gib
    assert job.to_dict()["retry_instance"]["type"] == job.retry_instance.type  # the runner names it
    retry = job_summary(job, "runs/r/jobs/j/")["retry"]
    assert retry == {
        "attempt": 1,
        "retry": None,
        "instance_type": job.retry_instance.type,
        "vcpus": job.retry_instance.vcpus,
        "quota": retry["quota"],
    }
    states = asl()["States"]["BuildJobs"]["ItemProcessor"]["States"]
    catches = states["Build"]["Catch"]
    assert catches[1] == {
        "ErrorEquals": ["CompilerOutOfMemory", "BuildTimedOut", "States.Timeout"],
        "ResultPath": "$.error",
        "Next": "TerminateForRetry",
    }
    assert catches[-1]["ErrorEquals"] == ["States.ALL"]
    terminate = states["TerminateForRetry"]
    assert terminate["Parameters"]["Payload"] == {"state.$": "$", "terminate": True, "record": False}
    assert terminate["Next"] == "RetryOnce" and terminate["Catch"][0]["Next"] == "TerminateFailed"
    once = states["RetryOnce"]
    assert once["Default"] == "KeepOrTerminate" and once["Choices"][0]["Next"] == "Relaunch"
    assert {"Variable": "$.job.retry", "IsNull": False} in once["Choices"][0]["And"]
    relaunch = states["Relaunch"]
    assert relaunch["Parameters"]["job.$"] == "States.JsonMerge($.job, $.job.retry, false)"
    assert relaunch["Next"] == "Launch"


def test_a_relaunched_attempt_gets_an_instance_of_its_own(aws: Any) -> None:  # noqa: F811
    ec2, ssm, settings = aws
    first = launch(event(), ec2, ssm, RUNNING, settings, NOW)
    again = event()
    again["job"] |= {"attempt": 1, "instance_type": "m7i.8xlarge", "retry": None}
    second = launch(again, ec2, ssm, RUNNING, settings, NOW)
    assert second["instance_id"] != first["instance_id"] and not second["reused"]
    tags = {i["InstanceId"]: T.tags_of(i) for i in live(ec2)}
    assert T.ATTEMPT not in tags[first["instance_id"]] and tags[second["instance_id"]][T.ATTEMPT] == "1"
    assert launch(again, ec2, ssm, RUNNING, settings, NOW)["reused"], "a retried relaunch reuses its own"
    assert client_token("e", "j", "spot") != client_token("e", "j", "spot", attempt=1)
    assert client_token("e", "j", "spot") == client_token("e", "j", "spot", attempt=0), "first launches: unchanged"


@pytest.mark.parametrize("kind", ["codebuild"])
def test_a_codebuild_job_is_not_relaunched(kind: str) -> None:
    small = {k: v for k, v in REQUEST.items() if k != "arch_list"} | {"cuda": ["cpu"], "options": {"executor": kind}}
    (job,) = plan_request(parse_request(small), load_catalog(), load_config()).jobs
    assert job.executor == kind and job.retry_instance is None and job_summary(job, "p/")["retry"] is None


def test_report_carries_the_peak_and_the_wheel_size_from_collect_into_the_sources_record() -> None:
    from tests.test_walltime import FakeS3
    from wheelfoundry.aws.timing import job_timing, record_cells

    config = load_config()
    timing = job_timing(_contract(), _manifest([("succeeded", 5427.0, None)]), config)
    s3 = FakeS3()
    run = {"id": "r1", "bucket": "b", "calibration_key": "calibration/x.json"}
    assert record_cells(s3, run, [{"timing": timing}]) == 1
    (cell,) = json.loads(s3.objects["calibration/x.json"])["cells"]
    assert (cell["peak_gib"], cell["wheel_bytes"]) == (5.3, 60_000_000)
    assert cell_cost(True, 2, config, json.loads(s3.objects["calibration/x.json"])).peak_gib == 5.3


def _big(publish: Any, record: dict[str, Any] | None = None) -> Any:
    """Four torch releases x one Python of a CUDA package whose cell wheel is 60 MB a cell at two archs."""
    request = {**REQUEST, "torch": ["2.10", "2.11", "2.12", "2.13"], "options": {"executor": "ec2", "publish": publish}}
    record = record or _record(_manifest([("succeeded", 3000.0, None)]))
    return plan_request(parse_request(request), load_catalog(), load_config(), record=record)


def test_a_merged_wheel_predicted_over_an_indexs_limit_is_planned_per_cell_where_the_index_takes_them() -> None:
    plan = _big({"url": "https://nexus.example.com/repository/py/", "max_file_mb": 100})
    assert plan.request.layout == "per-cell" and {j.extension.layout for j in plan.jobs if j.extension} == {"per-cell"}
    note = next(n for n in plan.notes if n.startswith("layout per-cell"))
    assert "the merged wheel for Python 3.12 x86_64 would be ~240 MB" in note and "limit of 100 MB" in note
    assert all(c.local_label for j in plan.jobs if j.extension for c in j.extension.cells)  # labels tell them apart
    roomy = _big({"url": "https://nexus.example.com/repository/py/", "max_file_mb": 500})
    assert roomy.request.layout == "auto" and not any("limit" in n for n in roomy.notes)


def test_over_pypis_limit_the_plan_names_a_public_channel_and_leaves_the_layout() -> None:
    plan = _big("pypi")
    assert plan.request.layout == "auto"
    note = next(n for n in plan.notes if "would be ~240 MB, over pypi's per-file limit of 100 MB" in n)
    assert "a public channel of the stack" in note
    modelled = _big("pypi", {"scope": "s", "cells": []})  # no recorded wheel: the model's 6 MB an architecture
    assert (modelled.jobs[0].extension.cell_wheel_bytes, modelled.jobs[0].extension.cell_wheel_recorded) == (
        12_000_000,
        False,
    )
    assert not any("over pypi" in n for n in modelled.notes)
