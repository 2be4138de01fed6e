"""Run the real Lambda handlers in-process instead of in moto's Docker runner.

`LambdaFunction._invoke_lambda` (private, hence moto's exact pin) is replaced. Every path into a
function lands there: the Invoke API, the ASL interpreter's lambda tasks, and this package's own
deliveries (custom resources, EventBridge targets).

Each function's configuration reaches its handler as `environ=` (docs/contracts.md §5), built from
that function's `Environment.Variables` over a copy of os.environ; os.environ itself is never
changed, because Map iterations call handlers from parallel threads.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._moto import Patches, utcnow


class InjectedFault(Exception):
    """Raised in place of a handler by FaultRegistry; its errorType is the injected name."""

    def __init__(self, error_type: str, message: str, after: bool = False) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.after = after


class FaultRegistry:
    """Make the next N invocations of a function fail with a chosen error name, before its handler runs.

    A function may be named by its physical name or by its logical id in a deployed template
    (deploy registers the aliases).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, list[list[Any]]] = {}  # name -> [[error, message, remaining, after]]
        self._aliases: dict[str, str] = {}  # logical id -> physical function name

    def inject(
        self, function: str, error: str, times: int = 1, message: str | None = None, after: bool = False
    ) -> None:
        """after=True: the handler runs (its side effects happen) and then the invocation fails, as when a
        function times out or loses its response after RunInstances succeeded."""
        if times < 1:
            raise ValueError("times must be >= 1")
        with self._lock:
            self._pending.setdefault(function, []).append([error, message or f"Injected fault: {error}", times, after])

    def alias(self, logical_id: str, function_name: str) -> None:
        with self._lock:
            self._aliases[logical_id] = function_name

    def resolve(self, name: str) -> str:
        with self._lock:
            return self._aliases.get(name, name)

    def pending(self) -> dict[str, int]:
        """Injected failures not yet consumed, per name as given to inject()."""
        with self._lock:
            return {k: sum(f[2] for f in v) for k, v in self._pending.items() if v}

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()
            self._aliases.clear()

    def take(self, function_name: str) -> InjectedFault | None:
        with self._lock:
            for key, faults in self._pending.items():
                if faults and function_name in (key, self._aliases.get(key)):
                    error, message, remaining, after = faults[0]
                    if remaining <= 1:
                        faults.pop(0)
                    else:
                        faults[0][2] = remaining - 1
                    return InjectedFault(error, message, after)
        return None


@dataclass(frozen=True)
class Invocation:
    function_name: str
    request_id: str
    event: Any
    result: Any  # the handler's return value, or the error payload
    error_type: str | None  # None when the invocation succeeded
    error_message: str | None
    injected: bool
    started: Any  # datetime (UTC)
    finished: Any

    @property
    def ok(self) -> bool:
        return self.error_type is None


class InvocationLog:
    """Every invocation, in completion order; thread-safe."""

    def __init__(self, faults: FaultRegistry) -> None:
        self._lock = threading.Lock()
        self._items: list[Invocation] = []
        self._faults = faults

    def record(self, invocation: Invocation) -> None:
        with self._lock:
            self._items.append(invocation)

    def all(self) -> list[Invocation]:
        with self._lock:
            return list(self._items)

    def of(self, function: str) -> list[Invocation]:
        """Invocations of one function, named by physical name or logical id."""
        name = self._faults.resolve(function)
        return [i for i in self.all() if i.function_name == name]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


@dataclass
class LambdaContext:
    """The attributes of the Lambda Python runtime's context object that handlers use."""

    function_name: str
    function_version: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    aws_request_id: str
    log_group_name: str
    log_stream_name: str
    timeout_seconds: float
    _deadline: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def _load_handler(spec: str) -> Callable[..., Any]:
    module_name, _, attribute = spec.rpartition(".")
    if not module_name:
        raise ImportError(f"Bad handler '{spec}': expected module.function")
    return getattr(importlib.import_module(module_name), attribute)  # type: ignore[no-any-return]


def _accepts_environ(handler: Callable[..., Any]) -> bool:
    try:
        # follow_wrapped=False: what matters is the object we call. A functools.wraps chain can
        # end in an inner function with another signature (a decorator that takes **kwargs and
        # forwards them is what passes `environ` through).
        params = inspect.signature(handler, follow_wrapped=False).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "environ" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


# On AWS every invocation has a sandbox of its own, CPU included, so a handler's wall time is its own
# work. Here all handlers share one process and its GIL with moto's server and interpreter: with 100 runs
# started at once, a hundred Launch handlers ran together and each took 100 times its CPU, past its 60 s
# timeout (bench/concurrency.py, 2026-11-26: 48 of 100 runs failed on Sandbox.Timedout in 4 minutes).
# So a bounded number run at once, as many sandboxes as keep that sharing small; no handler waits on
# another invocation, so waiting for one cannot deadlock.
SANDBOXES = 8


class LambdaRuntime:
    """Installs the in-process runner and holds what it records."""

    def __init__(self, enforce_timeouts: bool = True, sandboxes: int = SANDBOXES) -> None:
        self.sandboxes = threading.BoundedSemaphore(sandboxes)
        self.faults = FaultRegistry()
        self.invocations = InvocationLog(self.faults)
        self.enforce_timeouts = enforce_timeouts
        self._patches = Patches()
        self._code_dirs: list[str] = []
        self._task_roots: dict[tuple[str, str], str] = {}  # (bucket, key) of a code zip -> its source dir

    def install(self) -> None:
        from moto.awslambda.models import LambdaFunction

        runtime = self

        def _invoke_lambda(fn: Any, event: Any = None) -> tuple[str, bool, str]:
            return runtime.invoke(fn, event)

        self._patches.set(LambdaFunction, "_invoke_lambda", _invoke_lambda)

    def uninstall(self) -> None:
        self._patches.undo()
        for path in self._code_dirs:
            if path in sys.path:
                sys.path.remove(path)
        self._code_dirs.clear()
        self._task_roots.clear()

    def add_code(self, bucket: str, key: str, path: Path) -> None:
        """A code zip uploaded from `path`: functions created from it import from `path` (on sys.path)
        and see it as LAMBDA_TASK_ROOT, as they would see the unpacked zip on AWS."""
        text = str(path.resolve())
        self._task_roots[(bucket, key)] = text
        if text not in sys.path:
            sys.path.append(text)
            self._code_dirs.append(text)

    def environ_for(self, fn: Any) -> dict[str, str]:
        environ = dict(os.environ)
        # This deployment's build hosts (the local agent and CodeBuild) run stages without Docker, so no
        # builder image is built from the bundle's pins: Validate checks those for container builds only.
        # A function's own WF_CONTAINER (a test's update_function_configuration) still wins.
        environ["WF_CONTAINER"] = "none"
        environ.update({k: str(v) for k, v in (fn.environment_vars or {}).items()})
        # Reserved variables the Lambda runtime sets; functions cannot override them on AWS.
        environ.update(
            {
                "AWS_LAMBDA_FUNCTION_NAME": fn.function_name,
                "AWS_LAMBDA_FUNCTION_VERSION": str(fn.version),
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(fn.memory_size),
                "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{fn.function_name}",
                "AWS_REGION": fn.region,
                "AWS_DEFAULT_REGION": fn.region,
                "_HANDLER": str(fn.handler),
            }
        )
        code = fn.code if isinstance(fn.code, dict) else {}
        root = self._task_roots.get((code.get("S3Bucket", ""), code.get("S3Key", "")))
        if root is not None:
            environ["LAMBDA_TASK_ROOT"] = root
        return environ

    def invoke(self, fn: Any, event: Any) -> tuple[str, bool, str]:
        """moto's contract: (payload JSON, errored, logs). At most ``sandboxes`` handlers run at once; the
        others wait their turn, and a handler's clock (its timeout, the context's remaining time, the
        recorded start) starts when it runs (see SANDBOXES)."""
        with self.sandboxes:
            return self._invoke(fn, event)

    def _invoke(self, fn: Any, event: Any) -> tuple[str, bool, str]:
        # moto's invoke() passes the parsed body, or the text "{}" for an empty body.
        if event is None or event == "{}":
            event = {}
        request_id = str(uuid.uuid4())
        started = utcnow()
        timeout = float(fn.timeout or 3)
        context = LambdaContext(
            function_name=fn.function_name,
            function_version=str(fn.version),
            invoked_function_arn=fn.function_arn,
            memory_limit_in_mb=int(fn.memory_size),
            aws_request_id=request_id,
            log_group_name=f"/aws/lambda/{fn.function_name}",
            log_stream_name=f"{started:%Y/%m/%d}/[$LATEST]{request_id.replace('-', '')}",
            timeout_seconds=timeout,
        )
        fault = self.faults.take(fn.function_name)
        t0 = time.monotonic()
        result: Any
        error: tuple[str, str, list[str]] | None = None
        try:
            if fault is not None and not fault.after:
                raise fault
            handler = _load_handler(str(fn.handler))
            if _accepts_environ(handler):
                result = handler(event, context, environ=self.environ_for(fn))
            else:
                result = handler(event, context)
            payload = json.dumps(result)
            if fault is not None:
                raise fault
        except InjectedFault as exc:
            error = (exc.error_type, str(exc), [])
        except TypeError as exc:
            if "JSON serializable" in str(exc):  # what the Python runtime reports for a bad return value
                error = ("Runtime.MarshalError", f"Unable to marshal response: {exc}", [])
            else:
                error = (type(exc).__name__, str(exc), traceback.format_tb(exc.__traceback__))
        except Exception as exc:  # the runtime reports any exception as a function error
            error = (type(exc).__name__, str(exc), traceback.format_tb(exc.__traceback__))
        elapsed = time.monotonic() - t0
        if error is None and self.enforce_timeouts and elapsed > timeout:
            # Threads cannot be killed: the handler ran to completion, but AWS would have cut it off.
            error = (
                "Sandbox.Timedout",
                f"RequestId: {request_id} Error: Task timed out after {timeout:.2f} seconds",
                [],
            )
        if error is not None:
            body = {"errorType": error[0], "errorMessage": error[1], "stackTrace": error[2], "requestId": request_id}
            payload, result = json.dumps(body), body
        self.invocations.record(
            Invocation(
                function_name=fn.function_name,
                request_id=request_id,
                event=event,
                result=result,
                error_type=error[0] if error else None,
                error_message=error[1] if error else None,
                injected=fault is not None,
                started=started,
                finished=utcnow(),
            )
        )
        logs = f"START RequestId: {request_id}\nEND RequestId: {request_id}\n"
        return payload, error is not None, logs

    def invoke_by_name(self, region: str, function: str, event: Any) -> tuple[Any, bool]:
        """Invoke a function (name or ARN) as an AWS service would; return (parsed payload, errored)."""
        from ._moto import lambda_backend

        fn = lambda_backend(region).get_function(function)
        payload, errored, _ = self.invoke(fn, event)
        return json.loads(payload), errored
