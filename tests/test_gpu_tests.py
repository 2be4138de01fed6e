"""The GPU test step in the plan: which jobs get one, on what GPU, at what cost, and the guardrail."""

from __future__ import annotations

import itertools

import pytest

from tests.test_pins import EXTENSION
from tests.test_planning import plan
from wfbuild.gpu.gpu_probe import covers as probe_covers
from wheelfoundry.errors import GuardrailExceeded, RequestInvalid
from wheelfoundry.planning.gpu_tests import covers


def test_the_planner_and_the_gpu_hosts_probe_apply_one_arch_rule() -> None:
    lists = ["8.0", "8.6", "8.9", "9.0", "9.0a", "8.0+PTX", "7.5;8.0;8.6;9.0;10.0;12.0+PTX", "10.0a;12.0"]
    lists += ["9.0a+PTX", "10.0f", "10.0f+PTX", "12.0f;9.0+PTX"]  # arch- and family-specific PTX: no forward JIT
    capabilities = list(itertools.product(range(7, 13), range(0, 10)))
    for arch_list, capability in itertools.product(lists, capabilities):
        assert covers(arch_list, capability) == probe_covers(arch_list, capability), (arch_list, capability)


def test_only_cuda_jobs_get_a_gpu_test_with_its_gpu_market_hours_and_cost() -> None:
    planned = plan({**EXTENSION, "options": {"gpu_test": True}})
    # An extension's GPU step tests the published bytes: it runs on the test job, never on a build job.
    assert [j.gpu_test for j in planned.jobs] == [None, None]
    test = planned.tests[0].gpu_test
    assert test is not None and (test.instance_type, test.gpu, test.capability) == ("g6.xlarge", "NVIDIA L4", "8.9")
    assert test.spot and test.max_seconds == 3600 and test.testable and 0 < test.usd < 0.8048
    on_demand = plan({**EXTENSION, "options": {"gpu_test": {"spot": False, "max_hours": 0.5}}}).tests[0].gpu_test
    assert on_demand is not None and on_demand.usd == round(0.8048 * 0.5, 2) and on_demand.max_seconds == 1800
    assert plan(EXTENSION).tests[0].gpu_test is None  # off unless asked


def test_an_arch_list_the_gpu_cannot_run_is_planned_as_not_testable_and_said() -> None:
    planned = plan({**EXTENSION, "arch_list": "9.0", "options": {"gpu_test": True}})
    test = planned.tests[0].gpu_test
    assert test is not None and not test.testable
    assert any("not testable on NVIDIA L4 (sm_89)" in note for note in planned.notes)
    h100 = plan({**EXTENSION, "arch_list": "9.0", "options": {"gpu_test": {"instance_type": "p5.4xlarge"}}})
    assert h100.tests[0].gpu_test is not None and h100.tests[0].gpu_test.testable


def test_an_unknown_gpu_type_and_too_many_gpu_hours_are_refused_before_anything_runs() -> None:
    with pytest.raises(RequestInvalid, match=r"options\.gpu_test\.instance_type: 'c7i\.large' is not a GPU"):
        plan({**EXTENSION, "options": {"gpu_test": {"instance_type": "c7i.large"}}})
    # One GPU step per test job (per Python): three Pythons at 3 hours each.
    many = {
        **EXTENSION,
        "python": ["3.10", "3.11", "3.12"],
        "torch": ["2.11"],
        "options": {"gpu_test": {"max_hours": 3}},
    }
    with pytest.raises(GuardrailExceeded, match=r"9\.0 GPU-hours exceed this stack.s limit of 8\.0"):
        plan(many)
