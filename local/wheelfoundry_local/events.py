"""EventBridge delivery that moto does not do: to Lambda and Step Functions targets, for the events
AWS services emit (Step Functions status changes, SSM command status, spot warnings) and for
schedules (rules with ScheduleExpression, EventBridge Scheduler), which moto stores but never fires.

Rules and targets are read from moto's events backend (default bus), so what fires is exactly what
the template deployed. Delivery is synchronous on the caller's thread (deterministic in tests);
handler errors are recorded, never raised to the emitter, as on AWS. Lambda targets are invoked as
AWS invokes them (asynchronously): a failing handler is retried and then dead-lettered, and an event
that cannot be delivered at all goes to the target's dead-letter queue (dead_letters.py).
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import dead_letters
from ._moto import (
    ACCOUNT_ID,
    Patches,
    ec2_backend,
    events_backend,
    iso,
    lambda_backend,
    scheduler_backend,
    sfn_backend,
    utcnow,
)
from .lambdas import LambdaRuntime
from .patterns import matches

StartExecution = Callable[[str, str, str | None], str]  # (state machine ARN, input JSON, name) -> execution ARN


@dataclass(frozen=True)
class Delivery:
    rule: str  # rule or schedule name
    target_arn: str
    event: dict[str, Any]  # the envelope (for schedules: the target's input)
    input: Any  # what the target received
    result: Any  # handler payload, or the execution ARN started
    error: str | None  # errorType for a failed handler (after its retries)
    attempts: int = 1  # invocations of a Lambda target (1 + retries when it kept failing)
    dead_letter: str | None = None  # the queue ARN the event was dead-lettered to


def _target_input(target: dict[str, Any], event: dict[str, Any]) -> Any:
    if "Input" in target:
        return json.loads(target["Input"])
    if "InputPath" in target:
        from jsonpath_ng.ext.parser import parse

        found = parse(target["InputPath"]).find(event)
        return found[0].value if found else None
    if "InputTransformer" in target:
        from moto.events.utils import EventTemplateParser

        transformer = target["InputTransformer"]
        template, paths = transformer.get("InputTemplate"), transformer.get("InputPathsMap", {})
        return EventTemplateParser.parse(template, paths, event)  # type: ignore[arg-type]
    return event


class EventDelivery:
    def __init__(self, runtime: LambdaRuntime, region: str, start_execution: StartExecution) -> None:
        self.runtime = runtime
        self.region = region
        self._start_execution = start_execution
        self._lock = threading.Lock()
        self._log: list[Delivery] = []
        self._patches = Patches()

    # -- what was delivered ------------------------------------------------------------------
    def deliveries(self, rule: str | None = None) -> list[Delivery]:
        with self._lock:
            return [d for d in self._log if rule is None or d.rule == rule]

    def clear(self) -> None:
        with self._lock:
            self._log.clear()

    # -- events -------------------------------------------------------------------------------
    def envelope(
        self, source: str, detail_type: str, detail: dict[str, Any], resources: list[str] | None = None
    ) -> dict[str, Any]:
        return {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": detail_type,
            "source": source,
            "account": ACCOUNT_ID,
            "time": iso(utcnow()),
            "region": self.region,
            "resources": list(resources or []),
            "detail": detail,
        }

    def put(
        self, source: str, detail_type: str, detail: dict[str, Any], resources: list[str] | None = None
    ) -> list[Delivery]:
        """Emit an event as an AWS service would and deliver it to matching rules."""
        return self.deliver(self.envelope(source, detail_type, detail, resources))

    def deliver(self, event: dict[str, Any]) -> list[Delivery]:
        done: list[Delivery] = []
        for rule in list(events_backend(self.region).event_buses["default"].rules.values()):
            if rule.state != "ENABLED" or not matches(rule.event_pattern.get_pattern(), event):
                continue
            done += [self._to_target(rule.name, t, event) for t in list(rule.targets)]
        return done

    def _to_target(self, name: str, target: dict[str, Any], event: dict[str, Any]) -> Delivery:
        arn = target["Arn"]
        payload = _target_input(target, event)
        result: Any = None
        error: str | None = None
        attempts, dead_letter = 1, None
        service = arn.split(":")[2] if arn.count(":") >= 5 else ""
        try:
            if service == "lambda":
                result, error, attempts, dead_letter = self._invoke_async(arn, payload)
            elif service == "states":
                result = self._start_execution(arn, json.dumps(payload), None)
            else:
                raise NotImplementedError(f"target service {service!r} not delivered by wheelfoundry_local")
        except Exception as exc:  # not delivered at all: the target's own DLQ, as EventBridge does
            error = type(exc).__name__
            queue = (target.get("DeadLetterConfig") or {}).get("Arn")
            if queue:
                rule_arn = f"arn:aws:events:{self.region}:{ACCOUNT_ID}:rule/{name}"
                dead_letters.undeliverable(queue, payload, rule_arn, arn, error, str(exc)[:1000])
                dead_letter = queue
        delivery = Delivery(name, arn, event, payload, result, error, attempts, dead_letter)
        with self._lock:
            self._log.append(delivery)
        return delivery

    def _invoke_async(self, arn: str, payload: Any) -> tuple[Any, str | None, int, str | None]:
        """Lambda's asynchronous invocation: retries, then the function's DLQ. (result, error, attempts, dlq)"""
        config = dead_letters.async_config(self.region, lambda_backend(self.region).get_function(arn).function_name)
        result: Any = None
        for attempt in range(1, config.retries + 2):
            result, errored = self.runtime.invoke_by_name(self.region, arn, payload)
            if not errored:
                return result, None, attempt, None
        error = str(result.get("errorType", "Unhandled")) if isinstance(result, dict) else "Unhandled"
        if config.dead_letter_arn:
            dead_letters.function_failure(config.dead_letter_arn, payload, result, str(uuid.uuid4()))
        return result, error, config.retries + 1, config.dead_letter_arn

    # -- schedules and AWS-emitted events ------------------------------------------------------
    def fire_rule(self, name: str) -> list[Delivery]:
        """Fire a ScheduleExpression rule now (a disabled rule fires nothing, as on AWS)."""
        rule = events_backend(self.region).event_buses["default"].rules.get(name)
        if rule is None:
            raise KeyError(f"no rule {name!r} on the default bus")
        if not rule.scheduled_expression:
            raise ValueError(f"rule {name!r} has no ScheduleExpression")
        if rule.state != "ENABLED":
            return []
        event = self.envelope("aws.events", "Scheduled Event", {}, [rule.arn])
        return [self._to_target(name, t, event) for t in list(rule.targets)]

    def fire_schedule(self, name: str, group: str | None = None) -> Delivery:
        """Run an EventBridge Scheduler schedule's target now."""
        schedule = scheduler_backend(self.region).get_schedule(group, name)
        target = dict(schedule.target)
        raw = target.get("Input")
        if target["Arn"] == "arn:aws:scheduler:::aws-sdk:sfn:startExecution":  # universal target
            request = json.loads(raw or "{}")
            arn = self._start_execution(request["StateMachineArn"], request.get("Input", "{}"), request.get("Name"))
            delivery = Delivery(name, request["StateMachineArn"], request, request.get("Input"), arn, None)
            with self._lock:
                self._log.append(delivery)
            return delivery
        payload = json.loads(raw) if raw else {}
        dead_letter = {"DeadLetterConfig": target["DeadLetterConfig"]} if target.get("DeadLetterConfig") else {}
        return self._to_target(name, {"Arn": target["Arn"], "Input": json.dumps(payload), **dead_letter}, payload)

    def spot_interruption(self, instance_id: str, terminate_after: float | None = None) -> list[Delivery]:
        """The two-minute warning; optionally terminate the instance `terminate_after` seconds later."""
        detail = {"instance-id": instance_id, "instance-action": "terminate"}
        resources = [f"arn:aws:ec2:{self.region}:{ACCOUNT_ID}:instance/{instance_id}"]
        delivered = self.put("aws.ec2", "EC2 Spot Instance Interruption Warning", detail, resources)
        if terminate_after is not None:
            timer = threading.Timer(terminate_after, ec2_backend(self.region).terminate_instances, [[instance_id]])
            timer.daemon = True
            timer.start()
        return delivered

    # -- put_events from handlers ---------------------------------------------------------------
    def install(self) -> None:
        """Let moto's PutEvents reach Lambda/Step Functions targets too (moto raises NotImplementedError)."""
        from moto.events.models import Rule

        delivery = self

        def wrap(original: Callable[..., None]) -> Callable[..., None]:
            def send_to_targets(rule: Any, event: dict[str, Any], transform_input: bool = True) -> None:
                ours = [t for t in rule.targets if t["Arn"].split(":")[2:3] in (["lambda"], ["states"])]
                if len(ours) < len(rule.targets):
                    clone = copy.copy(rule)
                    clone.targets = [t for t in rule.targets if t not in ours]
                    original(clone, event, transform_input)
                if ours and rule.state == "ENABLED" and matches(rule.event_pattern.get_pattern(), event):
                    for target in ours:
                        delivery._to_target(rule.name, target, event)

            return send_to_targets

        self._patches.wrap(Rule, "send_to_targets", wrap)

    def uninstall(self) -> None:
        self._patches.undo()


class ExecutionWatcher:
    """Emit `Step Functions Execution Status Change` for every status an execution reaches."""

    def __init__(self, delivery: EventDelivery, interval: float = 0.1) -> None:
        self.delivery = delivery
        self.interval = interval
        self._seen: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="wf-execution-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def forget(self) -> None:
        """After a moto reset: executions are gone."""
        self._seen.clear()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def poll(self) -> None:
        backend = sfn_backend(self.delivery.region)
        for machine in list(backend.state_machines):
            for execution in list(getattr(machine, "executions", [])):
                status = execution.exec_status.value if execution.exec_status is not None else None
                previous = self._seen.get(execution.execution_arn)
                if status is None or status == previous:
                    continue
                self._seen[execution.execution_arn] = status
                if previous is None and status != "RUNNING":
                    self._emit(execution, "RUNNING")  # finished between two polls: AWS sent RUNNING too
                self._emit(execution, status)

    def _emit(self, execution: Any, status: str) -> None:
        def millis(ts: Any) -> int | None:
            return int(ts.timestamp() * 1000) if ts is not None else None

        ended = status != "RUNNING"
        output = json.dumps(execution.output, separators=(",", ":")) if ended and status == "SUCCEEDED" else None
        detail = {
            "executionArn": execution.execution_arn,
            "stateMachineArn": execution.state_machine_arn,
            "name": execution.name,
            "status": status,
            "startDate": millis(execution.start_date),
            "stopDate": millis(execution.stop_date) if ended else None,
            "input": json.dumps(execution.input_data, separators=(",", ":")),
            "output": output,
            "inputDetails": {"included": True},
            "outputDetails": {"included": True} if output is not None else None,
            "error": execution.error if ended else None,
            "cause": execution.cause if ended else None,
        }
        try:
            self.delivery.put("aws.states", "Step Functions Execution Status Change", detail, [execution.execution_arn])
        except Exception:  # best effort, as on AWS; a failing delivery must not stop the watcher
            logging.getLogger(__name__).exception("delivering the execution status event failed")
