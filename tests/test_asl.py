"""The shipped state machine: structure the design depends on, checked on the real file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ASL, all_states, asl, resources, substitutions_used
from wheelfoundry.errors import ASL_ERROR_NAMES

LAMBDA_RETRY = {
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.ClientExecutionTimeoutException",
}


def test_statelint_accepts_it() -> None:
    statelint = Path(sys.executable).with_name("statelint")
    result = subprocess.run([str(statelint), "--ignore=URI", str(ASL)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_substitution_is_provided_by_the_template() -> None:
    machine = resources("AWS::Serverless::StateMachine")["BuildStateMachine"]["Properties"]
    assert machine["DefinitionUri"] == "statemachine/build.asl.json"
    assert substitutions_used() == set(machine["DefinitionSubstitutions"])


def test_resources_come_only_through_substitutions() -> None:
    for name, state in all_states().items():
        if state["Type"] != "Task":
            continue
        params = state.get("Parameters", {})
        target = params.get("FunctionName") or params.get("DocumentName")
        assert target and target.startswith("${") and target.endswith("}"), name


def test_every_choice_has_a_default() -> None:
    choices = [s for s in all_states().values() if s["Type"] == "Choice"]
    assert choices and all("Default" in c for c in choices)


def test_lambda_tasks_use_invoke_with_the_standard_retries() -> None:
    for name, state in all_states().items():
        if state["Type"] == "Task" and "FunctionName" in state.get("Parameters", {}):
            # StartBuild alone waits for the runner's callback (the task token goes to S3, not the build).
            # BuildImage (runtime images) waits for the image job's callback the same way.
            wanted = "lambda:invoke.waitForTaskToken" if name in ("StartBuild", "BuildImage") else "lambda:invoke"
            assert state["Resource"] == f"arn:aws:states:::{wanted}", name
            covered = {e for r in state.get("Retry", []) for e in r["ErrorEquals"]}
            assert covered >= LAMBDA_RETRY or "States.ALL" in covered, name


def test_the_wait_is_event_driven_with_timeout_and_heartbeat() -> None:
    build = all_states()["Build"]
    assert build["Resource"] == "arn:aws:states:::aws-sdk:ssm:sendCommand.waitForTaskToken"
    assert build["Parameters"]["Parameters"]["TaskToken.$"] == "States.Array($$.Task.Token)"
    assert "TimeoutSecondsPath" in build and "HeartbeatSecondsPath" in build
    waits = [s for s in all_states().values() if s["Type"] == "Wait"]
    assert not waits, "no polling loops: waiting is a task token"


def test_error_names_matched_exist_as_classes() -> None:
    for name, state in all_states().items():
        for clause in state.get("Retry", []) + state.get("Catch", []):
            for error in clause["ErrorEquals"]:
                assert error.startswith(("States.", "Lambda.")) or error in ASL_ERROR_NAMES, (name, error)


def test_every_state_that_runs_after_launch_catches_into_termination() -> None:
    states = asl()["States"]["BuildJobs"]["ItemProcessor"]["States"]
    for name in ("Launch", "AwaitAgent", "Build", "Collect"):
        catches = states[name]["Catch"]
        assert catches[-1]["ErrorEquals"] == ["States.ALL"], name
        assert catches[-1]["Next"] == "KeepOrTerminate", name
    assert states["KeepOrTerminate"]["Default"] == "TerminateAfterFailure"
    assert states["Build"]["Catch"][0] == {
        "ErrorEquals": ["SpotInterrupted"],
        "ResultPath": "$.error",
        "Next": "TerminateSpot",
    }


def test_map_runs_jobs_as_child_executions_and_tolerates_failures() -> None:
    build_jobs = asl()["States"]["BuildJobs"]
    assert build_jobs["ItemProcessor"]["ProcessorConfig"] == {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"}
    assert build_jobs["ToleratedFailurePercentage"] == 100
    states = asl()["States"]
    # Two passes through the Map: the build jobs, then (phase 'test') the test jobs of the published bytes.
    assert build_jobs["Next"] == "AfterMap"
    after = states["AfterMap"]
    assert after["Default"] == "AfterBuilds" and after["Choices"][0]["Next"] == "Attest"
    assert {"Variable": "$.phase", "StringEquals": "test"} in after["Choices"][0]["And"]
    assert states["AfterBuilds"]["Next"] == "MergeOrIndex"
    assert (
        states["AfterBuilds"]["Parameters"]["build_jobs.$"] == "$.jobs"
        and states["AfterBuilds"]["Parameters"]["jobs"] == []
    )
    choice = states["MergeOrIndex"]
    assert choice["Default"] == "Attest" and choice["Choices"][0]["Next"] == "Merge"
    # A failed Merge tests, publishes and signs nothing: straight to Attest (nothing to sign) and Report.
    assert states["Merge"]["Catch"][0]["Next"] == "Attest" and states["Merge"]["Next"] == "TestsOrAttest"
    tests = states["TestsOrAttest"]
    assert tests["Default"] == "Attest" and tests["Choices"][0] == {
        "Variable": "$.merge.test_jobs[0]",
        "IsPresent": True,
        "Next": "BeginTests",
    }
    begin = states["BeginTests"]
    assert begin["Next"] == "BuildJobs" and begin["Parameters"]["phase"] == "test"
    assert begin["Parameters"]["jobs.$"] == "$.merge.test_jobs"
    # signing provenance never keeps the index from being published (docs/provenance.md)
    assert asl()["States"]["Attest"]["Catch"][-1]["Next"] == asl()["States"]["Attest"]["Next"] == "PublishIndex"
    assert asl()["States"]["Attest"]["Catch"][-1]["ErrorEquals"] == ["States.ALL"]


def test_a_merged_wheel_that_failed_its_test_falls_back_to_the_cell_wheels_once() -> None:
    states = asl()["States"]
    # Attest's evidence (wheelfoundry.aws.fallback): back to Merge, which stages the cell wheels for new test jobs.
    assert states["Attest"]["Catch"][0] == {
        "ErrorEquals": ["MergedWheelFailed"],
        "ResultPath": "$.fallback",
        "Next": "Remerge",
    }
    remerge = states["Remerge"]
    assert remerge["Parameters"]["FunctionName"] == "${MergeFunctionArn}"
    assert remerge["Parameters"]["Payload"]["fallback.$"] == "$.fallback"
    assert remerge["Parameters"]["Payload"]["failed_tests.$"] == "$.jobs"
    assert remerge["ResultPath"] == "$.merge" and remerge["Next"] == "TestsOrAttest"
    assert remerge["ResultSelector"] == states["Merge"]["ResultSelector"]
    # A failed fallback signs nothing: no test jobs to sign for, and Report names the merge's error.
    assert remerge["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.merge", "Next": "FallbackFailed"}]
    assert states["FallbackFailed"] == {
        **states["FallbackFailed"],
        "Result": [],
        "ResultPath": "$.jobs",
        "Next": "Attest",
    }
    # Once per run: Attest sees the fallback in its input, so every state that rebuilds the state keeps it.
    assert states["Validate"]["ResultSelector"]["fallback.$"] == "$.Payload.fallback"
    for name in ("AfterBuilds", "BeginTests"):
        assert states[name]["Parameters"]["fallback.$"] == "$.fallback", name
    assert states["Attest"]["Parameters"]["Payload"]["fallback.$"] == "$.fallback"
    assert asl()["States"]["PublishIndex"]["Catch"][0]["Next"] == "UploadOrImages"
    # no options.publish: no upload (issue 31); an upload's failure is caught and Report names it
    upload = asl()["States"]["UploadOrImages"]
    assert upload["Default"] == "ImagesOrReport" and upload["Choices"][0]["Next"] == "Upload"
    assert asl()["States"]["Upload"]["Catch"][0] == {
        "ErrorEquals": ["States.ALL"],
        "ResultPath": "$.upload",
        "Next": "ImagesOrReport",
    }
    assert asl()["States"]["Report"]["Parameters"]["Payload"]["upload.$"] == "$.upload"
    # Validate's placeholder travels through the states that rebuild the execution's state
    assert asl()["States"]["Validate"]["ResultSelector"]["upload.$"] == "$.Payload.upload"
    for name in ("AfterBuilds", "BeginTests"):
        assert asl()["States"][name]["Parameters"]["upload.$"] == "$.upload", name
    assert asl()["States"]["ImagesOrReport"]["Default"] == "Report"  # no image section: straight to Report


def test_publish_index_keeps_what_report_reads_of_it() -> None:
    """Report's public URLs come from PublishIndex's result: the find-links pages and the variant indexes
    (issue 65: a ResultSelector without variant_indexes left every run's report and `local demo` without them)."""
    selector = asl()["States"]["PublishIndex"]["ResultSelector"]
    for key in ("channel", "index_prefix", "variants", "variant_indexes"):
        assert selector[f"{key}.$"] == f"$.Payload.{key}", key
    assert asl()["States"]["Report"]["Parameters"]["Payload"]["publish.$"] == "$.publish"


@pytest.mark.parametrize("name", ["Validate", "Attest", "PublishIndex", "Upload", "Report"])
def test_top_level_tasks_exist(name: str) -> None:
    assert asl()["States"][name]["Type"] == "Task"


def test_the_codebuild_branch_waits_on_a_token_it_keeps_out_of_the_build_and_stops_on_failure() -> None:
    states = asl()["States"]["BuildJobs"]["ItemProcessor"]["States"]
    assert asl()["States"]["BuildJobs"]["ItemProcessor"]["StartAt"] == "ChooseExecutor"
    choose = states["ChooseExecutor"]
    assert choose["Default"] == "Launch"
    assert choose["Choices"][0]["Next"] == "StartBuild"
    assert {"Variable": "$.job.executor", "StringEquals": "codebuild"} in choose["Choices"][0]["And"]
    start = states["StartBuild"]
    assert start["Parameters"]["Payload"]["token.$"] == "$$.Task.Token"  # to the function only
    assert "TimeoutSecondsPath" in start and "HeartbeatSecondsPath" in start
    assert start["Next"] == "CollectBuild"
    assert states["CollectBuild"]["Parameters"]["FunctionName"] == states["Collect"]["Parameters"]["FunctionName"]
    for name in ("StartBuild", "CollectBuild"):
        assert states[name]["Catch"] == [
            {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "StopBuildAfterFailure"}
        ]
    assert states["StopBuildAfterFailure"]["Parameters"]["Payload"] == {"state.$": "$", "stop": True}
    assert states["FinishBuild"]["Parameters"]["Payload"] == {"state.$": "$", "stop": False}
    for name in ("FinishBuild", "StopBuildAfterFailure"):
        assert states[name]["Catch"][0]["Next"] == "StopBuildFailed" and states[name]["End"] is True
