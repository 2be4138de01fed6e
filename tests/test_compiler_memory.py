"""One quantity, one figure: the memory a compiler is planned at, from a measured peak, whether the peak
reaches the plan through the source's record (calibration) or the runner through an earlier attempt's
manifest (a relaunch), and whether the plan, the runner's log, the manifest or ``status`` prints it.

A machine decides the peak (956 MiB made the heavy memory test fail on one machine: the relaunch printed
1.12031 GiB, the plan 1.12); nothing but the rule may decide the figure."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wfbuild import hostinfo
from wfbuild.compiling import compiler_memory as runner_rule
from wfbuild.runner import cells, compile_memory
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.planning import compiler_memory as plan_rule
from wheelfoundry.planning.calibration import cell_cost, cells_of
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request
from wheelfoundry_user.status import memory_cell

REQUEST: dict[str, Any] = {
    "framework": "extension",
    "name": "wf-segops",
    "source": {"s3": "s3://wf-sources/sources/wf_segops-0.1.0.tar.gz"},
    "torch": ["2.13"],
    "cuda": ["cpu"],
    "python": ["3.11"],
    "options": {"executor": "ec2"},
}
CELL = "torch2.13.0-cp311-cpu-x86_64"
PEAKS = [956, 955, 957, 940.4, 1000, 1023, 1024, 1536.5, 5427, 200, 10, 31000]


def _manifest(peak_mib: float) -> dict[str, Any]:
    stage = {"name": f"build-{CELL}", "group": CELL, "status": "succeeded", "seconds": 60.0, "cpu_seconds": 110.0}
    stage["memory"] = {"peak_unit_mib": peak_mib}
    return {"stages": [stage], "wheels": [], "parallelism": {"max_jobs": 2, "nvcc_threads": 1}}


class _Job:
    """What wfbuild.runner.cells and CompileMemory read of the runner's Job: a relaunch whose earlier attempt's
    manifest recorded ``earlier`` MiB, planned at ``planned`` GiB a compiler."""

    def __init__(self, planned: str, earlier: float) -> None:
        self.job = {"env": {"WF_GIB_PER_COMPILE_JOB": planned, "WF_RESERVE_GIB": "1.0"}}
        self.memory = compile_memory.CompileMemory(self)  # type: ignore[arg-type]
        self.memory.earlier_peak_mib = int(earlier)


@pytest.mark.parametrize("peak", PEAKS)
def test_the_plan_the_log_the_manifest_and_status_print_one_figure_for_a_peak(
    peak: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hostinfo, "memory_gib", lambda: 4.0)
    monkeypatch.setattr(hostinfo, "cores", lambda: 2)
    peak = int(peak)  # the runner's memory watch records whole MiB
    config = load_config()
    contract = plan_request(parse_request(REQUEST), load_catalog(), config).jobs[0].to_dict()
    record = {"scope": "s", "cells": cells_of(contract, _manifest(peak), config)}
    planned = cell_cost(False, 1, config, record).gib_per_compiler(False, config)[0]
    assert planned == plan_rule.gib_per_compiler(plan_rule.recorded_gib(peak)), "the record path is the rule"
    plan = plan_request(parse_request(REQUEST), load_catalog(), config, record=record)
    (job,) = plan.jobs
    assert float(job.env["WF_GIB_PER_COMPILE_JOB"]) == planned
    words = plan_rule.words(planned)
    assert any(f"memory {words} a compiler" in note for note in plan.notes), plan.notes
    # A relaunch of a job the model under-planned (0.05 GiB), whose earlier attempt saw the same peak
    relaunch = _Job("0.05", peak)
    held, manifest = cells.memory_held(relaunch)  # type: ignore[arg-type]
    assert manifest == {"gib_per_compiler": planned, "gib_per_compiler_from": "earlier attempt"}
    assert f"at {words} each" in held, held
    assert memory_cell({"parallelism": manifest}) == f"{words} (earlier attempt)"
    # A relaunch of the plan made from the record: the same figure, the plan's
    same = _Job(job.env["WF_GIB_PER_COMPILE_JOB"], peak)
    held, manifest = cells.memory_held(same)  # type: ignore[arg-type]
    assert manifest == {"gib_per_compiler": planned, "gib_per_compiler_from": "plan"}
    assert f"at {words} each" in held and memory_cell({"parallelism": manifest}) == f"{words} (plan)"


@given(st.floats(min_value=0.5, max_value=600_000.0, allow_nan=False))
def test_the_runners_copy_of_the_rule_is_the_plans(peak_mib: float) -> None:
    recorded = plan_rule.recorded_gib(peak_mib)
    assert runner_rule.recorded_gib(peak_mib) == recorded
    assert runner_rule.gib_per_compiler(recorded) == plan_rule.gib_per_compiler(recorded)
    assert runner_rule.words(plan_rule.gib_per_compiler(recorded)) == plan_rule.words(
        plan_rule.gib_per_compiler(recorded)
    )
    assert (runner_rule.HEADROOM, runner_rule.FLOOR_GIB) == (plan_rule.HEADROOM, plan_rule.FLOOR_GIB)


def test_the_rule_rounds_once_to_the_hundredth_and_keeps_a_floor() -> None:
    assert plan_rule.recorded_gib(956) == 0.934 and plan_rule.gib_per_compiler(0.934) == 1.12
    assert plan_rule.gib_per_compiler(0.01) == plan_rule.FLOOR_GIB
    assert plan_rule.words(1.12) == "1.12 GiB" and plan_rule.words(4.0) == "4 GiB"
