"""EventBridge delivery that moto lacks: AWS-emitted events, schedules, PutEvents to Lambda."""

from __future__ import annotations

import json

import pytest

from wheelfoundry_local import DeployedStack, EmbeddedAws

from .conftest import launch, wait_for


def recorded(aws: EmbeddedAws, source: str) -> list[dict]:
    return [c.event for c in aws.invocations.of("RecorderFunction") if c.event.get("source") == source]


def test_failed_execution_is_delivered_to_the_rules_lambda(aws: EmbeddedAws, stack: DeployedStack) -> None:
    machine = stack.state_machine("ColorsMachine")
    ok = aws.wait_execution(aws.start_execution(machine, {"items": [1]}), timeout=30)
    aws.faults.inject("RedFunction", "Fatal")
    arn = aws.start_execution(machine, {"items": [1]})
    assert aws.wait_execution(arn, timeout=30).status == "FAILED"
    wait_for(lambda: len(recorded(aws, "aws.states")) == 1)
    (event,) = recorded(aws, "aws.states")
    assert event["detail-type"] == "Step Functions Execution Status Change"
    assert event["resources"] == [arn]
    detail = event["detail"]
    assert (detail["status"], detail["executionArn"], detail["stateMachineArn"]) == ("FAILED", arn, machine)
    assert detail["error"] == "Fatal" and detail["output"] is None
    assert isinstance(detail["startDate"], int) and detail["stopDate"] >= detail["startDate"]
    assert json.loads(detail["input"]) == {"items": [1]}
    # The watcher emitted every status (RUNNING, SUCCEEDED too); only FAILED matched the rule.
    assert ok.succeeded and all(d.event["detail"]["status"] == "FAILED" for d in aws.events.deliveries())


def test_fire_rule_delivers_a_scheduled_event_with_the_targets_input(aws: EmbeddedAws, stack: DeployedStack) -> None:
    tick = stack.rule_name("RecorderFunctionTick")
    (delivery,) = aws.events.fire_rule(tick)
    assert delivery.input == {"tick": True}  # the target's Input replaces the event
    assert delivery.event["detail-type"] == "Scheduled Event"
    assert delivery.event["resources"][0].endswith(f":rule/{tick}")
    assert delivery.error is None
    assert [c.event for c in aws.invocations.of("RecorderFunction")] == [{"tick": True}]
    with pytest.raises(ValueError, match="no ScheduleExpression"):
        aws.events.fire_rule(stack.rule_name("RecorderFunctionSpot"))
    aws.client("events").disable_rule(Name=tick)
    assert aws.events.fire_rule(tick) == []


def test_fire_schedule_starts_the_state_machine_with_its_input(aws: EmbeddedAws, stack: DeployedStack) -> None:
    delivery = aws.events.fire_schedule(stack.schedule_name("Nightly"))
    assert delivery.target_arn == stack.state_machine("ColorsMachine")
    result = aws.wait_execution(delivery.result, timeout=30)
    assert result.succeeded, result
    assert result.input == {"items": [1, 2], "from": stack.name}
    assert [pair[0]["item"] for pair in result.output["colors"]] == [1, 2]


def test_spot_interruption_warning(aws: EmbeddedAws, stack: DeployedStack) -> None:
    instance_id = launch(aws)
    (delivery,) = aws.events.spot_interruption(instance_id, terminate_after=0.1)
    # The Spot rule's InputPath ($.detail) selects what the function receives.
    assert delivery.input == {"instance-id": instance_id, "instance-action": "terminate"}
    assert aws.invocations.of("RecorderFunction")[0].event == delivery.input
    assert delivery.event["detail-type"] == "EC2 Spot Instance Interruption Warning"
    wait_for(lambda: aws.instances() == [], timeout=5)


def test_put_events_reaches_lambda_and_step_functions_targets(aws: EmbeddedAws, stack: DeployedStack) -> None:
    events = aws.client("events")
    events.put_rule(Name="to-colors", EventPattern=json.dumps({"source": ["wflt.colors"]}))
    events.put_targets(
        Rule="to-colors", Targets=[{"Id": "sm", "Arn": stack.state_machine("ColorsMachine"), "InputPath": "$.detail"}]
    )
    entries = [
        {"Source": "wflt.test", "DetailType": "hello", "Detail": json.dumps({"n": 1})},
        {"Source": "other.test", "DetailType": "ignored", "Detail": "{}"},
        {"Source": "wflt.colors", "DetailType": "go", "Detail": json.dumps({"items": [3]})},
    ]
    assert events.put_events(Entries=entries)["FailedEntryCount"] == 0
    (event,) = recorded(aws, "wflt.test")  # the Custom rule: source prefix "wflt."
    assert (event["detail-type"], event["detail"]) == ("hello", {"n": 1})
    assert recorded(aws, "other.test") == []
    (started,) = [d for d in aws.events.deliveries("to-colors")]
    assert aws.wait_execution(started.result, timeout=30).input == {"items": [3]}
