"""The real handlers run in-process: per-function environ, context, errors, faults, the log."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from wheelfoundry_local import DeployedStack, EmbeddedAws


def invoke(aws: EmbeddedAws, function: str, payload: Any) -> tuple[Any, str | None]:
    response = aws.client("lambda").invoke(FunctionName=function, Payload=json.dumps(payload))
    return json.loads(response["Payload"].read()), response.get("FunctionError")


def test_parallel_map_iterations_each_see_their_own_function_environment(
    aws: EmbeddedAws, stack: DeployedStack
) -> None:
    arn = aws.start_execution(stack.state_machine("ColorsMachine"), {"items": list(range(8))})
    result = aws.wait_execution(arn, timeout=30)
    assert result.succeeded, result
    pairs = result.output["colors"]
    assert [[red["item"], blue["item"]] for red, blue in pairs] == [[i, i] for i in range(8)]
    for red, blue in pairs:
        assert (red["color"], red["again"]) == ("red", "red")
        assert (blue["color"], blue["again"]) == ("blue", "blue")
        assert red["function"] == stack.function_name("RedFunction")
        assert blue["function"] == stack.function_name("BlueFunction")
        assert not red["in_os_environ"] and not blue["in_os_environ"]  # os.environ is never touched
        assert 0 < red["remaining_ms"] <= 10_000
    assert len(aws.invocations.of("RedFunction")) == 8
    assert len(aws.invocations.of(stack.function_name("BlueFunction"))) == 8
    # The plain-ARN task got the custom resource's Data through the function's environment.
    assert result.output["greet"]["message"] == "hello x3"
    assert result.output["greet"]["event"] == {"message": "hello x3", "limit": 5}


def test_handler_exception_becomes_a_function_error(aws: EmbeddedAws, stack: DeployedStack) -> None:
    payload, function_error = invoke(aws, stack.function_name("FailFunction"), {"why": "test"})
    assert function_error == "Handled"
    assert payload["errorType"] == "BuildExploded"
    assert "asked to fail" in payload["errorMessage"]
    assert any("wflt_handlers.py" in frame for frame in payload["stackTrace"])
    (call,) = aws.invocations.of("FailFunction")
    assert (call.ok, call.error_type, call.injected, call.event) == (False, "BuildExploded", False, {"why": "test"})
    assert call.finished >= call.started


def test_runtime_errors_as_lambda_reports_them(aws: EmbeddedAws, stack: DeployedStack) -> None:
    payload, _ = invoke(aws, stack.function_name("BadReturnFunction"), {})
    assert payload["errorType"] == "Runtime.MarshalError"
    payload, error = invoke(aws, stack.function_name("SlowFunction"), {"seconds": 1.2})  # Timeout: 1
    assert (error, payload["errorType"]) == ("Handled", "Sandbox.Timedout")
    payload, error = invoke(aws, stack.function_name("SlowFunction"), {"seconds": 0})
    assert (error, payload) == (None, {"slept": 0})


def test_plain_signature_and_lambda_variables(aws: EmbeddedAws, stack: DeployedStack) -> None:
    assert invoke(aws, stack.function_name("PlainFunction"), {}) == ({"plain": True}, None)
    payload, _ = invoke(aws, stack.function_name("EchoFunction"), {"x": 1})
    assert payload["event"] == {"x": 1}
    assert payload["task_root"].endswith("tests/local/fixtures/fn")  # LAMBDA_TASK_ROOT = the CodeUri


def test_injected_faults_fire_before_the_handler_then_stop(aws: EmbeddedAws, stack: DeployedStack) -> None:
    aws.faults.inject("PlainFunction", "Lambda.ServiceException", times=2)
    aws.faults.inject(stack.function_name("EchoFunction"), "Boom", message="custom message")
    assert aws.faults.pending() == {"PlainFunction": 2, stack.function_name("EchoFunction"): 1}
    first, second, third = (invoke(aws, stack.function_name("PlainFunction"), {}) for _ in range(3))
    assert first[0]["errorType"] == second[0]["errorType"] == "Lambda.ServiceException"
    assert third == ({"plain": True}, None)
    payload, _ = invoke(aws, stack.function_name("EchoFunction"), {})
    assert (payload["errorType"], payload["errorMessage"]) == ("Boom", "custom message")
    assert aws.faults.pending() == {}
    assert [c.injected for c in aws.invocations.of("PlainFunction")] == [True, True, False]


def test_injected_fault_is_retried_by_the_state_machine(aws: EmbeddedAws, stack: DeployedStack) -> None:
    aws.faults.inject("EchoFunction", "Transient")  # Greet retries Transient once
    result = aws.wait_execution(aws.start_execution(stack.state_machine("ColorsMachine"), {"items": [1]}), timeout=30)
    assert result.succeeded, result
    assert [c.error_type for c in aws.invocations.of("EchoFunction")] == ["Transient", None]


def test_uncaught_fault_fails_the_execution_with_its_name(aws: EmbeddedAws, stack: DeployedStack) -> None:
    aws.faults.inject("RedFunction", "Fatal", times=5)
    result = aws.wait_execution(aws.start_execution(stack.state_machine("ColorsMachine"), {"items": [1]}), timeout=30)
    assert (result.status, result.error) == ("FAILED", "Fatal")


def test_fault_injection_rejects_nonsense() -> None:
    from wheelfoundry_local.lambdas import FaultRegistry

    with pytest.raises(ValueError, match="times"):
        FaultRegistry().inject("f", "E", times=0)


def test_handlers_wait_for_a_sandbox_and_their_clock_starts_when_they_run(
    aws: EmbeddedAws, stack: DeployedStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On AWS each invocation has its own sandbox; here they share one GIL, so a bounded number run at once
    and one that waited for its turn is not timed out for the wait (SlowFunction's Timeout is 1 s)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(aws.runtime, "sandboxes", threading.BoundedSemaphore(1))
    name = stack.function_name("SlowFunction")
    before = len(aws.invocations.of(name))
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: invoke(aws, name, {"seconds": 0.6}), range(3)))
    assert results == [({"slept": 0.6}, None)] * 3, "an invocation was timed out for its wait"
    calls = sorted(aws.invocations.of(name)[before:], key=lambda c: c.started)
    assert len(calls) == 3
    for earlier, later in itertools.pairwise(calls):
        assert later.started >= earlier.finished, "two handlers ran at once in one sandbox"
