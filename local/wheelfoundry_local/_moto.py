"""Shared constants, moto backend accessors and a reversible monkey-patch helper.

Everything that touches moto's private structures goes through this module or names the moto
attribute explicitly, so a moto upgrade (moto is pinned exactly in pyproject.toml) has one place
to start from.
"""

from __future__ import annotations

import copy
import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

ACCOUNT_ID = "123456789012"  # moto's DEFAULT_ACCOUNT_ID: fake credentials map to it
DEFAULT_REGION = "us-east-1"


def utcnow() -> dt.datetime:
    return dt.datetime.now(tz=dt.UTC)


def iso(ts: dt.datetime) -> str:
    """ISO-8601 with a Z suffix, the format EventBridge uses for `time`."""
    if ts.tzinfo is None:  # moto stores naive UTC datetimes
        ts = ts.replace(tzinfo=dt.UTC)
    return ts.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def lambda_backend(region: str) -> Any:
    from moto.awslambda.models import lambda_backends

    return lambda_backends[ACCOUNT_ID][region]


def sfn_backend(region: str) -> Any:
    """The Step Functions backend that the API uses (the ASL interpreter's when execution is on)."""
    from moto.stepfunctions.responses import get_backend

    return get_backend(ACCOUNT_ID, region)


def ssm_backend(region: str) -> Any:
    from moto.ssm.models import ssm_backends

    return ssm_backends[ACCOUNT_ID][region]


def ec2_backend(region: str) -> Any:
    from moto.ec2.models import ec2_backends

    return ec2_backends[ACCOUNT_ID][region]


def events_backend(region: str) -> Any:
    from moto.events.models import events_backends

    return events_backends[ACCOUNT_ID][region]


def scheduler_backend(region: str) -> Any:
    from moto.scheduler.models import scheduler_backends

    return scheduler_backends[ACCOUNT_ID][region]


def s3_backend() -> Any:
    from moto.s3.models import s3_backends

    return s3_backends[ACCOUNT_ID]["aws"]


def cloudfront_backend() -> Any:
    from moto.cloudfront.models import cloudfront_backends

    return cloudfront_backends[ACCOUNT_ID]["aws"]


def cfn_backend(region: str) -> Any:
    from moto.cloudformation.models import cloudformation_backends

    return cloudformation_backends[ACCOUNT_ID][region]


def wake_stopped(execution: Any) -> None:
    """Let a stopped execution actually end.

    moto's StopExecution only flags the execution; a task waiting for a task token notices when
    its wait ends (its TimeoutSeconds), so the execution stays RUNNING until then. AWS aborts at
    once. Interrupting the execution's callback waits lets the interpreter see the stop now.
    """
    worker = getattr(execution, "exec_worker", None)
    pool = getattr(getattr(getattr(worker, "env", None), "callback_pool_manager", None), "_pool", {})
    for endpoint in list(pool.values()):
        endpoint.interrupt_all()


def _state_machine_deepcopy(machine: Any, memo: dict[int, Any]) -> Any:
    clone = object.__new__(type(machine))
    memo[id(machine)] = clone
    for key, value in vars(machine).items():
        if key == "executions":
            clone.__dict__[key] = []  # the clone belongs to one new execution
        elif key in ("backend", "versions", "aliases", "latest_version"):
            clone.__dict__[key] = value  # shared, as they would be on AWS
        else:
            clone.__dict__[key] = copy.deepcopy(value, memo)
    return clone


def install_sfn_fixes(patches: Patches) -> None:
    """Fixes for moto's executing Step Functions; each is what AWS does."""
    from moto.stepfunctions.models import StateMachine
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    # StartExecution deep-copies the state machine, which references its backend and through it
    # every execution with its threads and locks: the second execution in a region failed with
    # "cannot pickle '_thread.RLock' object". Copy the definition, share the rest.
    patches.set(StateMachine, "__deepcopy__", _state_machine_deepcopy)

    original = StepFunctionsParserBackend.stop_execution  # inherited from StepFunctionBackend

    def stop_execution(backend: Any, execution_arn: str, *args: Any, **kwargs: Any) -> Any:
        execution = original(backend, execution_arn, *args, **kwargs)
        wake_stopped(execution)
        return execution

    patches.set(StepFunctionsParserBackend, "stop_execution", stop_execution)

    # SendTaskFailure's response handler drops `cause`: the failure would reach the state machine
    # without the log tail that explains it. AWS delivers both error and cause.
    from moto.stepfunctions.responses import StepFunctionResponse

    def send_task_failure(response: Any) -> Any:
        from moto.core.responses import EmptyResult

        token, error, cause = (response._get_param(k) for k in ("taskToken", "error", "cause"))
        response.stepfunction_backend.send_task_failure(token, error=error, cause=cause)
        return EmptyResult()

    patches.set(StepFunctionResponse, "send_task_failure", send_task_failure)

    # A missed heartbeat is States.HeartbeatTimeout on AWS; moto reports it as States.Timeout.
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
        StatesErrorNameType,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_callback import (
        StateTaskServiceCallback,
    )
    from moto.stepfunctions.parser.asl.eval.callback.callback import HeartbeatTimeoutError

    def heartbeat_aware(from_error: Callable[..., Any]) -> Callable[..., Any]:
        def _from_error(state: Any, env: Any, ex: Exception) -> Any:
            event = from_error(state, env, ex)
            if isinstance(ex, HeartbeatTimeoutError):
                name = StatesErrorNameType.StatesHeartbeatTimeout
                event.error_name = StatesErrorName(typ=name)
                details = event.event_details.get("taskTimedOutEventDetails")
                if details is not None:
                    details["error"] = name.to_name()
            return event

        return _from_error

    patches.wrap(StateTaskServiceCallback, "_from_error", heartbeat_aware)

    # moto sets a task's heartbeat clock up after its service call returns: a SendTaskHeartbeat that
    # arrives first (a runner that beats as it starts) finds no clock and is refused InvalidToken, which
    # tells the runner its token is gone. On AWS the token is live from the call on: the beat counts.
    from moto.stepfunctions.parser.asl.eval.callback.callback import CallbackEndpoint

    def remember_early(notify_heartbeat: Callable[..., bool]) -> Callable[..., bool]:
        def _notify_heartbeat(endpoint: Any) -> bool:
            if endpoint._heartbeat_endpoint is None:
                endpoint.wf_early_heartbeat = True
                return True
            return notify_heartbeat(endpoint)

        return _notify_heartbeat

    def replay_early(setup: Callable[..., Any]) -> Callable[..., Any]:
        def _setup(endpoint: Any, heartbeat_seconds: int) -> Any:
            clock = setup(endpoint, heartbeat_seconds=heartbeat_seconds)
            if getattr(endpoint, "wf_early_heartbeat", False):
                clock.notify()
            return clock

        return _setup

    patches.wrap(CallbackEndpoint, "notify_heartbeat", remember_early)
    patches.wrap(CallbackEndpoint, "setup_heartbeat_endpoint", replay_early)

    # The interrupted wait surfaces as an error, and moto's set_error overwrites "stopped": the
    # execution would end FAILED. On AWS a stopped execution is ABORTED, whatever is in flight.
    from moto.stepfunctions.parser.asl.eval.environment import Environment
    from moto.stepfunctions.parser.asl.eval.program_state import ProgramStopped

    def wrap(set_error: Callable[..., None]) -> Callable[..., None]:
        def keep_stopped(env: Any, error: Any) -> None:
            if not isinstance(env._program_state, ProgramStopped):
                set_error(env, error)

        return keep_stopped

    patches.wrap(Environment, "set_error", wrap)


class Patches:
    """A set of attribute replacements that can be undone in reverse order.

    moto's behaviour is changed by replacing attributes of its classes and modules; keeping the
    originals lets `EmbeddedAws` leave the process as it found it.
    """

    def __init__(self) -> None:
        self._undo: list[tuple[object, str, object]] = []
        self._lock = threading.Lock()

    def set(self, owner: object, name: str, value: object) -> object:
        """Replace owner.name with value; return the original."""
        with self._lock:
            # vars() sees only the owner's own attribute: undoing an override of an inherited one
            # must delete it rather than copy the inherited value down.
            original = vars(owner).get(name)
            self._undo.append((owner, name, original))
            setattr(owner, name, value)
            return original

    def wrap(self, owner: type, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        """Replace a method by make(original_function)."""
        self.set(owner, name, make(vars(owner)[name]))

    def undo(self) -> None:
        with self._lock:
            while self._undo:
                owner, name, original = self._undo.pop()
                if original is None:
                    delattr(owner, name)
                else:
                    setattr(owner, name, original)
