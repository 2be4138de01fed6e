"""Retries and dead-letter queues for events, as AWS applies them, for events.py's deliveries.

Two different queues catch two different failures on AWS, and both are emulated:

- EventBridge delivers to a Lambda target *asynchronously*. Once Lambda accepted the event, a
  handler error is Lambda's business: it retries the invocation (EventInvokeConfig
  MaximumRetryAttempts, default 2) and then sends the event to the *function's* DeadLetterConfig
  queue, with the attributes RequestID, ErrorCode and ErrorMessage.
- An event EventBridge (or the scheduler) could not deliver at all (no such function, a target
  service it cannot reach) goes to the *target's* DeadLetterConfig queue, with RULE_ARN,
  TARGET_ARN, ERROR_CODE and ERROR_MESSAGE.

moto's Lambda model keeps neither a function's DeadLetterConfig nor its EventInvokeConfig, so they
are read from the template of the stack that created the function. Retries run at once here (AWS
waits about one and two minutes between them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ._moto import ACCOUNT_ID, cfn_backend

DEFAULT_ASYNC_RETRIES = 2  # Lambda's default for asynchronous invocations


@dataclass(frozen=True)
class AsyncConfig:
    retries: int
    dead_letter_arn: str | None


def _resolve(value: Any, stack: Any) -> Any:
    from moto.cloudformation.parsing import clean_json

    return clean_json(value, stack.resource_map)


def async_config(region: str, function_name: str) -> AsyncConfig:
    """The function's asynchronous-invocation settings, from the template its stack was created from."""
    for stack in list(cfn_backend(region).stacks.values()):
        resources = (stack.template_dict or {}).get("Resources", {})
        for logical_id, resource in resources.items():
            if resource.get("Type") != "AWS::Lambda::Function":
                continue
            model = stack.resource_map.get(logical_id)
            if getattr(model, "function_name", None) != function_name:
                continue
            props = resource.get("Properties", {})
            target = (props.get("DeadLetterConfig") or {}).get("TargetArn")
            retries = DEFAULT_ASYNC_RETRIES
            for other in resources.values():
                other_props = other.get("Properties", {})
                if other.get("Type") == "AWS::Lambda::EventInvokeConfig" and other_props.get("FunctionName") == {
                    "Ref": logical_id
                }:
                    retries = int(other_props.get("MaximumRetryAttempts", DEFAULT_ASYNC_RETRIES))
            return AsyncConfig(retries, str(_resolve(target, stack)) if target else None)
    return AsyncConfig(DEFAULT_ASYNC_RETRIES, None)


def send(queue_arn: str, body: Any, attributes: dict[str, str]) -> None:
    """Put a dead letter on the queue (the queue must exist: on AWS a missing DLQ loses the event)."""
    from moto.sqs.models import sqs_backends

    _, _, _, region, account, name = queue_arn.split(":", 5)
    backend = sqs_backends[account or ACCOUNT_ID][region]
    attrs = {k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()}
    backend.send_message(name, json.dumps(body, separators=(",", ":")), message_attributes=attrs)


def function_failure(queue_arn: str, event: Any, result: Any, request_id: str) -> None:
    """What Lambda sends to a function's DLQ after the last retry of an asynchronous invocation."""
    message = result.get("errorMessage", "") if isinstance(result, dict) else str(result)
    send(queue_arn, event, {"RequestID": request_id, "ErrorCode": "200", "ErrorMessage": str(message)[:1000]})


def undeliverable(queue_arn: str, event: Any, rule_arn: str, target_arn: str, code: str, message: str) -> None:
    """What EventBridge sends to a target's DLQ for an event it could not deliver."""
    attributes = {"RULE_ARN": rule_arn, "TARGET_ARN": target_arn, "ERROR_CODE": code, "ERROR_MESSAGE": message}
    send(queue_arn, event, attributes)
