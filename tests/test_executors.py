"""The executor choice per job (wheelfoundry.planning.executors): CodeBuild when it fits and costs no more."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import FarmConfig, load_config
from wheelfoundry.errors import RequestInvalid
from wheelfoundry.planning.executors import ExecutorRefused, choose, price
from wheelfoundry.planning.jobs import Job
from wheelfoundry.planning.plan import Plan
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request

ROOT = Path(__file__).resolve().parents[1]
THREE_TARGETS: dict[str, Any] = json.loads((ROOT / "examples/requests/torch-2.5.1-three-targets.json").read_text())
DEMO: dict[str, Any] = json.loads((ROOT / "examples/requests/extension-demo.json").read_text())
CUDA = {"version": "2.5.1", "python": ["3.11", "3.12"], "targets": [{"accelerator": "cuda", "cuda": "12.4"}]}


def plan(raw: dict[str, Any], config: FarmConfig | None = None) -> Plan:
    config = config or load_config()
    return plan_request(parse_request(raw, load_catalog(), config), load_catalog(), config)


def with_options(raw: dict[str, Any], **options: Any) -> dict[str, Any]:
    return {**raw, "options": {**raw.get("options", {}), **options}}


def small_price(config: FarmConfig, arch: str, usd_per_minute: float) -> FarmConfig:
    types = tuple(
        dataclasses.replace(t, usd_per_minute=usd_per_minute) if t.name == "BUILD_GENERAL1_SMALL" else t
        for t in config.codebuild.compute_types[arch]
    )
    compute_types = {**config.codebuild.compute_types, arch: types}
    return dataclasses.replace(config, codebuild=dataclasses.replace(config.codebuild, compute_types=compute_types))


def test_torch_builds_go_to_ec2_and_the_extension_demo_to_codebuild() -> None:
    torch = plan(THREE_TARGETS)
    assert [(j.id, j.executor) for j in torch.jobs] == [
        ("torch2.5.1-cpu-x86_64", "ec2"),
        ("torch2.5.1-cuda12.4-x86_64", "ec2"),
        ("torch2.5.1-cpu-aarch64", "ec2"),
    ]
    cuda = torch.jobs[1]
    assert cuda.compute_type is None and cuda.executor_reason.startswith("ec2 m7i.8xlarge spot")
    assert "< codebuild BUILD_GENERAL1_2XLARGE" in cuda.executor_reason
    (ext,) = plan(DEMO).jobs
    assert ext.executor == "codebuild" and ext.compute_type == "BUILD_GENERAL1_SMALL"
    minutes = math.ceil(ext.estimate.hours * 60)
    assert ext.estimate.usd == round(minutes * 0.005, 2)  # started minutes x the per-minute price
    assert " <= ec2 c7i.4xlarge spot " in ext.executor_reason
    assert ext.env["MAX_JOBS"] == "1" and ext.extension is not None and ext.extension.parallel_cells == 1
    contract = ext.to_dict()
    assert contract["executor"] == "codebuild" and contract["compute_type"] == "BUILD_GENERAL1_SMALL"


def test_aarch64_jobs_get_arm_compute_types_and_prices() -> None:
    (job,) = plan({**DEMO, "platforms": ["aarch64"]}).jobs
    assert job.executor == "codebuild" and job.compute_type == "BUILD_GENERAL1_SMALL"
    assert job.estimate.usd == round(math.ceil(job.estimate.hours * 60) * 0.0034, 2)  # arm1.small, not general1
    config = load_config()
    assert {t.arch for t in config.codebuild.compute_types["aarch64"]} == {"aarch64"}
    arm = plan(with_options(THREE_TARGETS, executor="codebuild")).jobs[2]
    assert arm.platform == "aarch64" and arm.executor == "codebuild"
    assert arm.compute_type in {t.name for t in config.codebuild.compute_types["aarch64"]}
    assert arm.env["MAX_JOBS"] == "47"  # ARM 2XLARGE: 48 vCPUs, (96 - 1) / 2 GiB per compile job


def test_explicit_ec2_is_honoured_where_auto_picks_codebuild() -> None:
    (job,) = plan(with_options(DEMO, executor="ec2")).jobs
    assert job.executor == "ec2" and job.compute_type is None
    assert job.executor_reason.startswith("options.executor is 'ec2'")
    assert job.env["MAX_JOBS"] == "14"  # sized for the c7i.4xlarge, untouched


def test_explicit_codebuild_is_honoured_and_resized() -> None:
    (job,) = plan(with_options(CUDA, executor="codebuild")).jobs
    assert job.executor == "codebuild" and job.compute_type == "BUILD_GENERAL1_2XLARGE"
    assert job.env["MAX_JOBS"] == "36"  # (145 - 1) / 4 GiB per nvcc job, not the m7i.8xlarge's 31
    assert job.executor_reason.startswith("options.executor is 'codebuild'")
    ec2 = plan(CUDA).jobs[0]
    assert ec2.executor == "ec2" and job.estimate.usd > 10 * ec2.estimate.usd  # honoured, though dearer


def test_explicit_codebuild_refused_naming_field_value_job_and_limit() -> None:
    long_build = with_options({**CUDA, "python": ["3.9", "3.10", "3.11", "3.12"]}, executor="codebuild", max_hours=4)
    with pytest.raises(ExecutorRefused) as caught:
        plan(long_build)
    (issue,) = caught.value.issues
    assert issue.path == "options.executor" and issue.value == "codebuild" and issue.allowed == ("auto", "ec2")
    assert "torch2.5.1-cuda12.4-x86_64" in issue.message and "past options.max_hours 4" in issue.message
    assert isinstance(caught.value, RequestInvalid)  # Validate refuses it like any request mistake
    # auto falls back to EC2 for the same job, and says why
    (job,) = plan(with_options(long_build, executor="auto")).jobs
    assert job.executor == "ec2" and job.executor_reason.startswith("no CodeBuild type fits")


def test_codebuild_timeout_limit_refuses_every_job_at_once() -> None:
    config = load_config()
    short = dataclasses.replace(config, codebuild=dataclasses.replace(config.codebuild, max_build_minutes=30))
    with pytest.raises(ExecutorRefused) as caught:
        plan(with_options(THREE_TARGETS, executor="codebuild", max_hours=48), short)
    assert len(caught.value.issues) == 3
    assert all("past CodeBuild's build timeout of 0.5 h" in i.message for i in caught.value.issues)


def test_price_tie_goes_to_codebuild_one_cent_more_to_ec2() -> None:
    config = load_config()
    (ec2,) = plan(with_options(DEMO, executor="ec2")).jobs
    minutes = math.ceil(ec2.estimate.hours * 60)
    auto = dataclasses.replace(ec2, options=dataclasses.replace(ec2.options, executor="auto"))
    tie = small_price(config, "x86_64", ec2.estimate.usd / minutes)
    assert choose(auto, tie).executor == "codebuild"
    dearer = small_price(config, "x86_64", (ec2.estimate.usd + 0.01) / minutes)
    choice = choose(auto, dearer)
    assert choice.executor == "ec2" and choice.reason.startswith(f"ec2 c7i.4xlarge spot ${ec2.estimate.usd:.2f}")


def test_a_compute_type_without_memory_for_one_compile_job_is_never_chosen() -> None:
    job: Job = plan({**DEMO, "cuda": ["13.0"], "torch": ["2.14"]}).jobs[0]
    small = load_config().codebuild.compute_types["x86_64"][0]
    priced = price(job, small, load_config())
    assert priced.problem is not None and "one compile job needs 5 GiB" in priced.problem  # nvcc: 4 + 1 reserve
    cuda_on_codebuild = plan(with_options({**DEMO, "cuda": ["13.0"], "torch": ["2.14"]}, executor="codebuild")).jobs
    assert cuda_on_codebuild[0].compute_type != "BUILD_GENERAL1_SMALL"
