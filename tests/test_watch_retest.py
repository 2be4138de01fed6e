"""Release day without a compile, the watcher's side: a new torch inside a subscription's range, a channel holding
a stable-ABI wheel of the package, a retest run first (no build), and the build once the retest ended without
serving the cells. Pure ticks against the recorded indexes, then the stack's tick with moto's S3 and Step Functions.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError
from wheelfoundry_cli.watch_local import recorded

from tests.test_watch_stack import BUCKET, NOW, SUB, aws, recording, sdist, settings  # noqa: F401
from tests.watch_support import run_tick, subscription
from wheelfoundry.aws.notify import summary
from wheelfoundry.aws.watch import run_tick as stack_tick
from wheelfoundry.publishing.coverage import Coverage
from wheelfoundry.request.stable_wheels import serves_python

STABLE = "wheels/extensions/torch-scatter/torch_scatter-2.1.2+abi214cpu-cp312-cp312-manylinux_2_28_x86_64.whl"


def channel(key: str = STABLE, variants: tuple[str, ...] = ("torch-2.14.1+cpu",)) -> dict[str, Any]:
    return {"format": 1, "wheels": {key: {"sha256": "1" * 64, "variants": list(variants)}}}


def test_a_stable_wheel_serves_its_major_python_and_platform_from_its_floor_on() -> None:
    coverage = Coverage.of([channel()])
    found = coverage.stable_wheel("torch_scatter", "2.1.2", "3.12", "x86_64", "2.15", "cpu")
    assert found is not None and found.key == STABLE and found.floor == "2.14" and found.kind == "cpu"
    assert coverage.stable_wheel("torch-scatter", "2.1.2", "3.12", "x86_64", "2.13", "cpu") is None  # below floor
    assert coverage.stable_wheel("torch-scatter", "2.1.2", "3.12", "x86_64", "2.15", "cu130") is None  # CUDA major
    assert coverage.stable_wheel("torch-scatter", "2.1.2", "3.11", "x86_64", "2.15", "cpu") is None  # cp312 only
    assert coverage.stable_wheel("torch-scatter", "2.1.3", "3.12", "x86_64", "2.15", "cpu") is None  # version
    per_torch = STABLE.replace("abi214cpu", "pt214cpu")
    assert (
        Coverage.of([channel(per_torch)]).stable_wheel("torch-scatter", None, "3.12", "x86_64", "2.15", "cpu") is None
    )
    cu13 = STABLE.replace("abi214cpu", "abi214cu13").replace("cp312-cp312", "cp39-abi3")
    found = Coverage.of([channel(cu13, ("torch-2.14.1+cu130",))]).stable_wheel(
        "torch-scatter", None, "3.13", "x86_64", "2.15", "cu132"
    )
    assert found is not None and found.kind == "cu13"  # abi3 serves later Pythons; cu132 is CUDA 13's


def test_a_py39_none_stable_wheel_as_xformers_ships_serves_python_3_9_on() -> None:
    py39 = STABLE.replace("abi214cpu", "abi214cu13").replace("cp312-cp312", "py39-none")
    coverage = Coverage.of([channel(py39, ("torch-2.14.1+cu130",))])
    assert coverage.has("torch-scatter", "2.1.2", "3.13", "x86_64", "2.14", "cu130")  # served: no rebuild each tick
    assert not coverage.has("torch-scatter", "2.1.2", "3.8", "x86_64", "2.14", "cu130")
    found = coverage.stable_wheel("torch-scatter", None, "3.12", "x86_64", "2.15", "cu130")
    assert found is not None and found.key == py39 and found.python == (3, 9) and found.abi3
    name = py39.rsplit("/", 1)[1]
    assert serves_python(name, "3.9") and serves_python(name, "3.14") and not serves_python(name, "3.8")
    assert serves_python(name.replace("py39", "py3"), "3.8")
    assert not serves_python(name.replace("py39-none", "pp39-pypy39_pp73"), "3.9")


def test_a_new_torch_a_stable_wheel_may_serve_is_a_retest_with_its_build_as_fallback() -> None:
    sub = subscription(cuda=["cpu", "13.0"], python=["3.12"], torch=">=2.14")
    result = run_tick([sub], channel())
    by_reason = {s.reason: s for s in result.starts}
    retest = next(s for s in result.starts if "retest" in s.request)
    assert retest.cells == (("2.15.0", "cpu", "3.12", "x86_64"),)
    assert retest.request["retest"] == [STABLE] and retest.request["abi"] == "stable"
    assert retest.reason.endswith("(stable ABI) is tested there first, with no build")
    assert retest.plan["jobs"] == [] and retest.plan["tests"] == ["torch-scatter-test-cp312-x86_64"]
    assert retest.copy is None  # no build: no sdist to copy
    build = retest.fallback
    assert build is not None and build.cells == retest.cells and "retest" not in build.request
    assert build.name != retest.name and build.plan["jobs"] and build.request["layout"] == "per-cell"
    # the CUDA 13.0 cells (no cu13 wheel) and 2.14's 13.0 cell are built as before
    built = {c for s in result.starts if "retest" not in s.request for c in s.cells}
    assert ("2.15.0", "13.0", "3.12", "x86_64") in built and ("2.14.1", "13.0", "3.12", "x86_64") in built
    assert len(by_reason) == len(result.starts)


def test_a_per_torch_subscription_is_always_built() -> None:
    result = run_tick([subscription(cuda=["cpu"], python=["3.12"], torch=">=2.14", abi="per-torch")], channel())
    (start,) = result.starts
    assert (
        "retest" not in start.request
        and start.fallback is None
        and start.cells == (("2.15.0", "cpu", "3.12", "x86_64"),)
    )


class Executions:
    """Step Functions' executions by name, their status set by the test (moto's may finish at once)."""

    def __init__(self) -> None:
        self.status: dict[str, str] = {}

    def describe_execution(self, executionArn: str) -> dict[str, str]:
        name = executionArn.rsplit(":", 1)[1]
        if name not in self.status:
            raise ClientError({"Error": {"Code": "ExecutionDoesNotExist"}}, "DescribeExecution")
        return {"status": self.status[name]}

    def start_execution(self, stateMachineArn: str, name: str, input: str) -> dict[str, str]:
        self.status[name] = "RUNNING"
        return {"executionArn": f"{stateMachineArn.replace(':stateMachine:', ':execution:')}:{name}"}


def test_the_tick_after_a_retest_that_did_not_serve_starts_the_build(aws: Any, tmp_path: Any) -> None:  # noqa: F811
    s3, _, machine = aws
    sfn = Executions()
    sub = {**SUB, "cuda": ["cpu"], "abi": "stable"}
    s3.put_object(Bucket=BUCKET, Key="subscriptions/wf-tiny-ext.json", Body=json.dumps(sub))
    key = "wheels/ci/wf-tiny-ext/wf_tiny_ext-0.1.0+abi214cpu-cp312-cp312-manylinux_2_28_x86_64.whl"
    s3.put_object(Bucket=BUCKET, Key="simple/ci/.index-state.json", Body=json.dumps(channel(key)))
    fetch = recorded(recording(tmp_path, sdist()))
    (first,) = stack_tick(s3, sfn, fetch, settings(machine), NOW)["runs"]
    assert first["status"] == "started" and first["request"]["retest"] == [key]
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix="sources/").get("KeyCount") == 0  # nothing to build from
    (again,) = stack_tick(s3, sfn, fetch, settings(machine), NOW)["runs"]
    assert again["status"] == "already started (RUNNING)" and list(sfn.status) == [first["name"]]
    sfn.status[first["name"]] = "FAILED"  # it ended; the channel still lacks torch 2.15.0's cell
    (build,) = stack_tick(s3, sfn, fetch, settings(machine), NOW)["runs"]
    assert build["status"] == "started" and "retest" not in build["request"] and build["name"] != first["name"]
    assert f"the retest {first['name']} ended (FAILED) without serving them; building" in build["reason"]
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix="sources/")["KeyCount"] == 1  # the build's sdist, copied now
    (later,) = stack_tick(s3, sfn, fetch, settings(machine), NOW)["runs"]
    assert later["status"] == "already started (RUNNING)" and later["name"] == build["name"] and len(sfn.status) == 2


def test_the_notice_says_served_with_no_build_and_the_minutes_or_that_a_build_follows() -> None:
    record = {"subscription": "wf-stable", "reason": "torch 2.14.1 released: ... with no build",
              "request": {"retest": [STABLE]}, "cells": [{"torch": "2.15.0", "cuda": "cpu", "python": "3.12"}]}  # fmt: skip
    name = STABLE.rsplit("/", 1)[1]
    report = {"run_id": "w-1", "status": "succeeded", "provenance": {"tested": [name]}, "release_day": {"minutes": 3.2}}
    subject, message = summary(record, report)
    assert subject == "WheelFoundry wf-stable: torch 2.15.0 served, no build in 3.2 min"
    assert f"{name}: passed; listed for torch 2.15.0" in message and "next watcher tick builds" not in message
    subject, message = summary(record, {**report, "status": "failed", "provenance": {"tested": []}})
    assert subject == "WheelFoundry wf-stable: retest FAILED in 3.2 min"
    assert f"{name}: did not pass" in message and "the next watcher tick builds the cells" in message
