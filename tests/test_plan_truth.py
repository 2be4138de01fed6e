"""`wheelfoundry plan` says what happens: notes true for the executor chosen, arch lists once per cell, right-sized
instances (with the reason under --explain), and options.max_wall_hours honoured or reported for framework runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from wheelfoundry_cli.render import render_plan

from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.planning import walltime
from wheelfoundry.planning.calibration import cell_cost
from wheelfoundry.planning.plan import Plan
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.planning.source_profile import SourceProfile
from wheelfoundry.request.request import parse_request

ROOT = Path(__file__).resolve().parents[1]
EXT = {
    "framework": "extension",
    "name": "wf-example-ops",
    "source": {"s3": "s3://bucket/sources/wf-example-ops-0.1.0.tar.gz"},
    "torch": ["2.14"],
    "cuda": ["cpu", "13.0"],
    "python": ["3.12"],
}


def plan(raw: dict[str, Any], profile: SourceProfile | None = None) -> Plan:
    catalog, config = load_catalog(), load_config()
    return plan_request(parse_request(raw, catalog, config), catalog, config, profile=profile)


def test_each_note_is_true_for_the_executor_its_job_runs_on() -> None:
    p = plan(EXT)
    by_id = {j.id: j for j in p.jobs}
    assert {j.executor for j in p.jobs} == {"codebuild", "ec2"}
    for note in p.notes:
        job = by_id.get(note.split(":", 1)[0])
        if job is None or "cell(s)" not in note:
            continue
        if job.executor == "codebuild":
            assert f"CodeBuild {job.compute_type}" in note and job.instance.type not in note, note
        else:
            assert f"on one {job.instance.type}" in note and "CodeBuild" not in note, note
    assert sum("cell(s)" in n for n in p.notes) == len(p.jobs)


def test_an_arch_list_is_shown_once_per_cell_not_again_on_the_test_job() -> None:
    p = plan({**EXT, "cuda": ["cpu", "12.6", "13.0"]})
    text = render_plan(p)
    for job in p.jobs:
        if job.arch_list:
            assert text.count(f"[{job.arch_list}]") == 1, job.arch_list
    test_row = next(line for line in text.splitlines() if line.startswith("wf-example-ops-test-"))
    assert "(cpu, cu126, cu130)" in test_row and "[" not in test_row


def test_cells_that_cannot_use_a_large_instance_get_a_smaller_one_as_fast_and_cheaper() -> None:
    raw = {
        **EXT,
        "cuda": ["cpu"],
        "torch": ["2.13", "2.14"],
        "python": ["3.11", "3.12"],
        "options": {"executor": "ec2"},
    }
    default, sized = plan(raw), plan(raw, SourceProfile(cpp_units=1, cu_units=0))
    (before,), (after,) = default.jobs, sized.jobs
    assert before.instance.type == "c7i.4xlarge" and after.instance.vcpus < before.instance.vcpus
    assert after.estimate.usd < before.estimate.usd
    wide = plan(raw, SourceProfile(cpp_units=64, cu_units=0)).jobs[0]
    assert wide.instance.vcpus >= 16  # a package of many units keeps the large instance busy
    text = render_plan(sized, explain=True)
    assert f"instance {after.instance.type}, not c7i.4xlarge: its 4 cell(s) keep at most 1 core(s) busy" in text


def test_the_wall_of_a_right_sized_job_holds() -> None:
    # 4 one-unit cells: a 4-vCPU c7i.xlarge would be cheaper still but build them in two waves (slower).
    raw = {
        **EXT,
        "cuda": ["cpu"],
        "torch": ["2.13", "2.14"],
        "python": ["3.11", "3.12"],
        "options": {"executor": "ec2"},
    }
    units = SourceProfile(cpp_units=1, cu_units=0)
    (job,) = plan(raw, units).jobs
    config = load_config()
    cost = cell_cost(False, 1, config, profile=units)
    found = walltime.options(4, False, 1, cost, "x86_64", True, config)
    default = next(o for o in found if o.instance.name == "c7i.4xlarge" and o.shards == 1)
    assert job.instance.type != "c7i.4xlarge" and job.estimate.hours <= round(default.wall, 2)
    assert any(o.usd < default.usd and o.wall > default.wall for o in found)  # what the rule turned down


def torch_request(**options: Any) -> dict[str, Any]:
    raw = json.loads((ROOT / "examples/requests/torch-2.5.1-three-targets.json").read_text())
    raw["options"] |= options
    return raw


def test_a_framework_request_without_max_wall_hours_plans_one_job_per_target_as_before() -> None:
    p = plan(torch_request())
    assert [j.id for j in p.jobs] == ["torch2.5.1-cpu-x86_64", "torch2.5.1-cuda12.4-x86_64", "torch2.5.1-cpu-aarch64"]
    assert "max_wall_hours" not in render_plan(p)


def test_a_framework_request_meets_a_reachable_max_wall_hours_at_the_least_cost() -> None:
    p = plan(torch_request(max_wall_hours=2.5))
    assert p.wall_hours <= 2.5
    assert "max_wall_hours 2.5: met" in render_plan(p)
    loose = plan(torch_request(max_wall_hours=48))
    assert [j.id for j in loose.jobs] == [j.id for j in plan(torch_request()).jobs]  # the default layout is cheapest


def test_an_unreachable_framework_max_wall_hours_is_reported_with_the_best_layout_found() -> None:
    p = plan(torch_request(max_wall_hours=1))
    text = render_plan(p)
    assert "max_wall_hours 1: NOT met" in text
    note = next(n for n in p.notes if "cannot be met" in n)
    assert f"the fastest layout found takes {p.wall_hours:.2f} h" in note
    assert p.wall_hours < plan(torch_request()).wall_hours  # it did the best it could: per Python, larger


def test_plan_imports_no_aws_session_trust_store_or_requirement_parser_for_a_cpu_request() -> None:
    code = (
        "import sys, io, contextlib\n"
        "from wheelfoundry_cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['plan', 'examples/requests/extension-demo.json'])\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert "wheelfoundry.planning.planning" in loaded
    for lazy in ("boto3", "botocore", "wheelfoundry_user.farm", "wheelfoundry_user.trust", "packaging.requirements"):
        assert lazy not in loaded, lazy
