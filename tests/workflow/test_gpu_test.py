"""The GPU test step (options.gpu_test) through the real template and state machine.

A CUDA 13.0 job of the tiny extension builds here for real; then the state machine ends the build
instance, launches a GPU instance (g6.xlarge, from the Deep Learning Base AMI's public parameter) and
sends it the GpuTest document, whose real script runs wfbuild.gpu.gpu_runner. This machine has no GPU, so
the real probe says "no CUDA device" and the step is "skipped-in-emulation", never "passed". The other
paths swap in a stand-in probe (WF_GPU_PROBE, honoured only where WF_GPU_HOST=emulated): one that
reports a failed check, one that hangs. Every test ends with no instance left (conftest's stack).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.workflow.conftest import extension_request, launched_by, s3_json, s3_keys, source, upload, wait_for
from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_user.farm import Farm
from wheelfoundry_user.logs import show_log
from wheelfoundry_user.status import render_status, run_status

pytestmark = pytest.mark.heavy  # real CUDA builds: `make test-heavy` (.ci/heavy), not `make test`
FAILING = """
import json
print("WF-GPU " + json.dumps({"begin": "package tests"}))
print("WF-GPU " + json.dumps({"check": "package tests", "ok": False, "detail": "AssertionError: 1 != 2"}))
print("WF-GPU " + json.dumps({"verdict": "failed", "failed": "package tests", "gpu": "Emulated L4",
      "capability": "8.9", "detail": "AssertionError: 1 != 2"}))
"""
TEST_JOB = "wf-tiny-ext-test-cp311-x86_64"  # the GPU step tests the published bytes: the test job's
HANGING = 'import time\ntime.sleep({seconds})\nprint(\'WF-GPU {{"verdict": "no-device", "detail": "slept"}}\')\n'


def gpu_request(uri: str, **gpu: Any) -> dict[str, Any]:
    options = {"executor": "ec2", "gpu_test": {"instance_type": "g6.xlarge", "spot": True, **gpu}}
    return extension_request(uri, torch=["2.14"], cuda=["13.0"], arch_list="8.9", layout="per-cell", options=options)


def stand_in(aws: EmbeddedAws, tmp_path: Path, text: str) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(textwrap.dedent(text))
    assert aws.agent is not None
    aws.agent.environment["WF_GPU_PROBE"] = str(probe)


def gpu_command_running(aws: EmbeddedAws) -> Any:
    """The GpuTest document's command, once the agent runs it (the build has passed by then)."""
    agent = aws.agent
    assert agent is not None
    running = wait_for(
        lambda: [r for r in agent.runs() if "GpuTest" in r.document_name and r.status == "InProgress"],
        timeout=900,
        what="the GPU test command",
    )
    return running[0]


def phases(aws: EmbeddedAws, arn: str) -> list[tuple[str, str, str]]:
    return sorted(
        (i["Tags"].get("wheelfoundry:phase", "build"), i["InstanceType"], i["State"]["Name"])
        for i in launched_by(aws, arn, tests=True)
    )


def test_a_passing_gpu_step_publishes_and_records_its_verdict(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    arn = aws.start_execution(stack.state_machine_arn, gpu_request(upload(aws, stack, source(tmp_path))))
    result = aws.wait_execution(arn, timeout=900)
    assert result.succeeded, (result.error, result.cause)
    # The build, the test of the published bytes, then the GPU step on those same bytes (DESIGN §10b).
    # The test job installs and tests wheels, compiling nothing: the planner gives it the smallest type.
    built, tested = ("build", "c7i.4xlarge", "terminated"), ("build", "c7i.xlarge", "terminated")
    assert phases(aws, arn) == [built, tested, ("gpu-test", "g6.xlarge", "terminated")]
    run_id = result.output["run_id"]
    prefix = f"runs/{run_id}/jobs/{TEST_JOB}/"
    verdict = s3_json(aws, stack, prefix + "result.json")["gpu_test"]
    assert verdict["verdict"] == "skipped-in-emulation", verdict  # no GPU here: never "passed"
    report = s3_json(aws, stack, prefix + "gpu-test.json")
    assert [g["verdict"] for g in report["groups"]] == ["no-device"] and report["groups"][0]["torch"] == "2.14.1"
    jobs = s3_json(aws, stack, f"runs/{run_id}/report.json")["jobs"]
    assert [(j["job_id"], j["gpu_test"]) for j in jobs] == [
        ("wf-tiny-ext-cuda13.0-x86_64", None),  # the cell wheels are not what is published: no GPU step there
        (TEST_JOB, "skipped-in-emulation"),
    ]
    assert [k for k in s3_keys(aws, stack, "wheels/ci/wf-tiny-ext/") if k.endswith(".whl")]


def test_a_failed_gpu_test_publishes_nothing_and_names_the_gpu_and_the_check(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    stand_in(aws, tmp_path, FAILING)
    arn = aws.start_execution(stack.state_machine_arn, gpu_request(upload(aws, stack, source(tmp_path))))
    result = aws.wait_execution(arn, timeout=900)
    assert result.status == "FAILED"
    cause = result.cause or ""
    assert "GpuTestFailed" in cause and "Emulated L4" in cause and "AssertionError: 1 != 2" in cause
    assert not s3_keys(aws, stack, "wheels/ci/"), "a failed GPU test publishes nothing"
    run_id = arn.rsplit(":", 1)[1]
    gpu = s3_json(aws, stack, f"runs/{run_id}/jobs/{TEST_JOB}/result.json")["gpu_test"]
    assert gpu["verdict"] == "failed" and "Emulated L4" in gpu["detail"]
    assert all(state == "terminated" for _, _, state in phases(aws, arn))
    # what `wheelfoundry status RUN` shows: the verdict per job, the GPU and the failed check in its detail
    farm = Farm(stack.name, endpoint_url=aws.endpoint, region=aws.region)
    shown = render_status(run_status(farm, run_id))
    assert "GPU TEST" in shown and "GpuTestFailed: GPU test failed on Emulated L4" in shown, shown
    printed: list[str] = []
    assert show_log(farm, run_id, TEST_JOB, False, 0.1, printed.append) == 0
    log = "".join(printed)
    assert f"GPU test of {TEST_JOB} (gpu-test.log)" in log and "FAIL package tests" in log, log


PASSING = """
import json
print("WF-GPU " + json.dumps({"verdict": "passed", "gpu": "Emulated L4", "capability": "8.9", "detail": "ok"}))
"""
# Passes where the GPU is hidden (the test job's smoke: CUDA_VISIBLE_DEVICES=""), fails where it is visible:
# so only a GPU step that runs the request's own command can fail this run.
ON_GPU_ONLY = """import os

import wf_tiny_ext


def test_scale_on_the_gpu():
    assert wf_tiny_ext is not None
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == "", "failing on purpose where the GPU is visible"
"""


def test_the_gpu_step_runs_the_requests_test_command_and_its_failure_publishes_nothing(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    stand_in(aws, tmp_path, PASSING)  # the GPU probe passes: what fails is the package's own test
    folder = source(tmp_path)
    (folder / "tests").mkdir()
    (folder / "tests" / "test_on_gpu.py").write_text(ON_GPU_ONLY)
    request = gpu_request(upload(aws, stack, folder))
    request["test"] = {
        "requires": ["pytest"],
        "command": ["-m", "pytest", "-q", "-p", "no:cacheprovider", "{project}/tests"],
    }
    arn = aws.start_execution(stack.state_machine_arn, request)
    result = aws.wait_execution(arn, timeout=900)
    assert result.status == "FAILED", (result.error, result.cause)
    cause = result.cause or ""
    assert "GpuTestFailed" in cause and "check 'package tests'" in cause and "test_scale_on_the_gpu" in cause, cause
    assert not s3_keys(aws, stack, "wheels/ci/"), "a failed GPU test publishes nothing"
    run_id = arn.rsplit(":", 1)[1]
    gpu = s3_json(aws, stack, f"runs/{run_id}/jobs/{TEST_JOB}/result.json")["gpu_test"]
    assert gpu["verdict"] == "failed" and "check 'package tests'" in gpu["detail"], gpu
    assert all(state == "terminated" for _, _, state in phases(aws, arn))


def test_a_gpu_test_past_its_time_limit_ends_and_publishes_nothing(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    stand_in(aws, tmp_path, HANGING.format(seconds=300))
    request = gpu_request(upload(aws, stack, source(tmp_path)), max_hours=0.006)  # 21.6 s for the whole step
    result = aws.wait_execution(aws.start_execution(stack.state_machine_arn, request), timeout=900)
    assert result.status == "FAILED" and "ended TimedOut" in (result.cause or ""), result.cause
    assert not s3_keys(aws, stack, "wheels/ci/")


def test_an_interrupted_spot_gpu_test_runs_again_on_demand(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    stand_in(aws, tmp_path, HANGING.format(seconds=6))
    arn = aws.start_execution(stack.state_machine_arn, gpu_request(upload(aws, stack, source(tmp_path))))
    first = gpu_command_running(aws)
    aws.events.spot_interruption(first.instance_id)
    result = aws.wait_execution(arn, timeout=900)
    assert result.succeeded, (result.error, result.cause)
    gpu = [(market, state) for phase, market, state in _markets(aws, arn) if phase == "gpu-test"]
    assert gpu == [("ondemand", "terminated"), ("spot", "terminated")]


def _markets(aws: EmbeddedAws, arn: str) -> list[tuple[str, str, str]]:
    return sorted(
        (i["Tags"].get("wheelfoundry:phase", "build"), i["Tags"]["wheelfoundry:market"], i["State"]["Name"])
        for i in launched_by(aws, arn, tests=True)
    )


def test_a_lambda_error_after_the_gpu_test_publishes_nothing_and_ends_every_instance(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    stand_in(aws, tmp_path, HANGING.format(seconds=5))
    arn = aws.start_execution(stack.state_machine_arn, gpu_request(upload(aws, stack, source(tmp_path))))
    gpu_command_running(aws)
    aws.faults.inject("CollectFunction", "Boom")  # the Publish state's Collect, after the GPU verdict
    result = aws.wait_execution(arn, timeout=900)
    assert result.status == "FAILED" and "Boom" in (result.cause or ""), result.cause
    assert not s3_keys(aws, stack, "wheels/ci/"), "nothing published"
    assert [state for _, _, state in phases(aws, arn)] == ["terminated"] * 3  # build, test, GPU
