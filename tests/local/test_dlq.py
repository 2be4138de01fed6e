"""Issue 10 item 4: every event-driven step survives its own failure. In the embedded AWS, with the
real template: a failing event is retried and ends in the stack's dead-letter queue; an event that
cannot be delivered at all ends there too; every rule and schedule target has a retry policy and
that queue."""

from __future__ import annotations

import json
from typing import Any

import pytest

from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_local.testing import wf_parameters, wf_stack, wf_template  # noqa: F401


@pytest.fixture
def stack(wf_stack: DeployedStack) -> DeployedStack:  # noqa: F811
    return wf_stack


def _queue_url(aws: EmbeddedAws, stack: DeployedStack) -> str:
    return str(stack.outputs["EventDeadLetterQueueUrl"])


def _dead_letters(aws: EmbeddedAws, stack: DeployedStack) -> list[dict[str, Any]]:
    sqs = aws.client("sqs")
    got = sqs.receive_message(
        QueueUrl=_queue_url(aws, stack), MaxNumberOfMessages=10, MessageAttributeNames=["All"], WaitTimeSeconds=0
    )
    messages: list[dict[str, Any]] = got.get("Messages", [])
    return messages


def _execution_failed(aws: EmbeddedAws, stack: DeployedStack) -> list[Any]:
    arn = stack.state_machine_arn.replace(":stateMachine:", ":execution:") + ":run-x"
    detail = {"status": "FAILED", "stateMachineArn": stack.state_machine_arn, "executionArn": arn, "name": "run-x"}
    return aws.events.put("aws.states", "Step Functions Execution Status Change", detail, [arn])


def test_a_failing_reaper_event_is_retried_then_dead_lettered(aws: EmbeddedAws, stack: DeployedStack) -> None:
    aws.faults.inject("ReaperFunction", "Boom", times=3, message="reaper broke")  # the call and 2 retries
    (delivery,) = _execution_failed(aws, stack)
    assert (delivery.error, delivery.attempts) == ("Boom", 3)
    (message,) = _dead_letters(aws, stack)
    assert delivery.dead_letter and delivery.dead_letter.endswith(":" + _queue_url(aws, stack).rsplit("/", 1)[1])
    body = json.loads(message["Body"])
    assert body["detail"]["status"] == "FAILED" and body["detail-type"] == "Step Functions Execution Status Change"
    attributes = {k: v["StringValue"] for k, v in message["MessageAttributes"].items()}
    assert attributes["ErrorMessage"] == "reaper broke" and attributes["RequestID"]


def test_a_transient_failure_is_retried_and_not_dead_lettered(aws: EmbeddedAws, stack: DeployedStack) -> None:
    aws.faults.inject("ReaperFunction", "Boom", times=2)
    (delivery,) = _execution_failed(aws, stack)
    assert (delivery.error, delivery.attempts, delivery.dead_letter) == (None, 3, None)
    assert _dead_letters(aws, stack) == []


def test_an_undeliverable_event_goes_to_the_targets_dead_letter_queue(aws: EmbeddedAws, stack: DeployedStack) -> None:
    aws.client("lambda").delete_function(FunctionName=stack.function_name("CallbackFunction"))
    (delivery,) = aws.events.spot_interruption("i-0123456789abcdef0")
    assert delivery.error and delivery.attempts == 1
    (message,) = _dead_letters(aws, stack)
    attributes = {k: v["StringValue"] for k, v in message["MessageAttributes"].items()}
    assert attributes["RULE_ARN"].endswith(stack.rule_name("CallbackFunctionSpotInterruption"))
    assert attributes["TARGET_ARN"].endswith(stack.function_name("CallbackFunction"))
    assert json.loads(message["Body"])["detail"]["instance-id"] == "i-0123456789abcdef0"


def test_the_sweep_schedule_dead_letters_too(aws: EmbeddedAws, stack: DeployedStack) -> None:
    aws.faults.inject("ReaperFunction", "Boom", times=3)
    (delivery,) = aws.events.fire_rule(stack.rule_name("ReaperFunctionSweep"))
    assert delivery.dead_letter is not None and len(_dead_letters(aws, stack)) == 1


def test_every_event_target_has_retries_and_the_dead_letter_queue(aws: EmbeddedAws, stack: DeployedStack) -> None:
    events = aws.client("events")
    queue_arn = aws.client("sqs").get_queue_attributes(QueueUrl=_queue_url(aws, stack), AttributeNames=["QueueArn"])
    dlq = queue_arn["Attributes"]["QueueArn"]
    rules = events.list_rules()["Rules"]
    assert len(rules) >= 5  # callback: SSM, spot, CodeBuild; reaper: execution ended, sweep
    for rule in rules:
        for target in events.list_targets_by_rule(Rule=rule["Name"])["Targets"]:
            assert target["DeadLetterConfig"]["Arn"] == dlq, rule["Name"]
            assert target["RetryPolicy"]["MaximumRetryAttempts"] >= 2, rule["Name"]
    schedule = aws.client("scheduler").get_schedule(Name=stack.schedule_name("NightlySchedule"))
    assert schedule["Target"]["DeadLetterConfig"]["Arn"] == dlq and schedule["Target"]["RetryPolicy"]
    template = stack.template["Resources"]
    assert template["EventDeadLetterQueue"]["Properties"]["SqsManagedSseEnabled"] is True
    for function in ("CallbackFunction", "ReaperFunction"):
        props = template[function]["Properties"]
        assert props["ReservedConcurrentExecutions"] >= 1
        assert props["DeadLetterConfig"]["TargetArn"] == {"Fn::GetAtt": ["EventDeadLetterQueue", "Arn"]}
    alarms = {k: v["Properties"] for k, v in template.items() if v["Type"] == "AWS::CloudWatch::Alarm"}
    watched = {
        a["Dimensions"][0]["Value"].get("Ref") or a["Dimensions"][0]["Value"]["Fn::GetAtt"][0] for a in alarms.values()
    }
    assert {"EventDeadLetterQueue", "ReaperFunction"} <= watched
