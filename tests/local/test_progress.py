"""The demo's progress lines (wheelfoundry_local.progress): a CodeBuild job names the runner's stages as an EC2
job does, and each change of state is printed once, a finished job's line never again."""

from __future__ import annotations

import time
from typing import Any

from wheelfoundry_local.lambdas import FaultRegistry, Invocation, InvocationLog
from wheelfoundry_local.progress import Progress

FUNCTIONS = ("LaunchFunction", "AwaitAgentFunction", "CollectFunction", "TerminateFunction")
FUNCTIONS += ("StartBuildFunction", "StopBuildFunction")


class Stack:
    """What Progress reads of a deployed stack: its functions' physical names."""

    resources = {name: {} for name in FUNCTIONS}

    def function_name(self, logical_id: str) -> str:
        return f"wf-{logical_id}"


def call(log: InvocationLog, function: str, event: dict[str, Any], result: dict[str, Any]) -> None:
    log.record(Invocation(f"wf-{function}", "r", event, result, None, None, False, None, None))


def stage(name: str) -> str:
    return f"[wfbuild 03:48:12] stage {name}: succeeded in 0.9s"


def test_a_codebuild_job_names_each_stage_and_its_end_once() -> None:
    progress, log, stack = Progress(), InvocationLog(FaultRegistry()), Stack()
    job = {"id": "wf-example-ops-cpu-x86_64"}
    call(log, "StartBuildFunction", {"job": job}, {"build_id": "wf-build-x86_64:1234", "reused": False})
    printed = progress.update(stack, log)  # type: ignore[arg-type]
    for name in ("env-torch2.13.0-cp311", "build-torch2.13.0-cp311", "repair-torch2.13.0-cp311"):
        progress.on_output("wf-build-x86_64:1234", "", stage(name))
        progress.on_output("wf-build-x86_64:1234", "", "gcc -O2 -c ops.cpp")  # not a stage line
        printed += progress.update(stack, log)  # type: ignore[arg-type]
        printed += progress.update(stack, log)  # type: ignore[arg-type]  # nothing changed: nothing printed
    call(log, "CollectFunction", {"job": job}, {})
    call(log, "StopBuildFunction", {"state": {"job": job}}, {"status": "succeeded"})
    for _ in range(3):
        printed += progress.update(stack, log)  # type: ignore[arg-type]
    printed += progress.still_running(quiet=0)
    states = [" ".join(line.split()[1:-1]) for line in printed]
    assert states == [
        "building on CodeBuild",
        "building on CodeBuild (env-torch2.13.0-cp311)",
        "building on CodeBuild (build-torch2.13.0-cp311)",
        "building on CodeBuild (repair-torch2.13.0-cp311)",
        "succeeded, build finished",
    ]


def test_an_ec2_job_names_its_stages_and_a_quiet_job_repeats_only_while_running() -> None:
    progress, log, stack = Progress(), InvocationLog(FaultRegistry()), Stack()
    job = {"id": "wf-example-ops-cpu-x86_64"}
    call(log, "LaunchFunction", {"job": job}, {"instance_id": "i-0abc"})
    call(log, "AwaitAgentFunction", {"instance_id": "i-0abc"}, {})
    progress.on_output("i-0abc", "cmd-1", stage("build-torch2.13.0-cp311"))
    printed = progress.update(stack, log)  # type: ignore[arg-type]
    assert [" ".join(line.split()[1:-1]) for line in printed] == ["building (build-torch2.13.0-cp311)"]
    assert progress.still_running(quiet=3600) == []
    time.sleep(0.01)
    assert [" ".join(line.split()[1:-1]) for line in progress.still_running(quiet=0)] == [
        "building (build-torch2.13.0-cp311)"
    ]
    call(log, "TerminateFunction", {"state": {"job": job}}, {"status": "succeeded"})
    assert len(progress.update(stack, log)) == 1  # type: ignore[arg-type]
    assert progress.still_running(quiet=0) == []


def test_a_runs_progress_shows_its_own_jobs_not_another_runs_on_the_same_stack() -> None:
    """tools/corpus.py builds packages at once on one stack: each package's lines are its own run's jobs."""
    progress, log, stack = Progress(run="run-a"), InvocationLog(FaultRegistry()), Stack()
    for run, instance in (("run-a", "i-0aaa"), ("run-b", "i-0bbb")):
        job = {"id": f"{run}-cpu-x86_64"}
        call(log, "LaunchFunction", {"job": job, "run": {"id": run}}, {"instance_id": instance})
        call(log, "AwaitAgentFunction", {"instance_id": instance}, {})
        call(log, "TerminateFunction", {"state": {"job": job, "run": {"id": run}}}, {"status": "succeeded"})
    printed = progress.update(stack, log)  # type: ignore[arg-type]
    assert [line.split()[0] for line in printed] == ["run-a-cpu-x86_64"]
    assert list(progress.jobs) == ["run-a-cpu-x86_64"]
