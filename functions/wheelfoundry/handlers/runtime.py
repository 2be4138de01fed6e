"""What every handler shares: Powertools, the function's environment, and AWS clients.

Handlers are ``handler(event, context, environ=None)``: Lambda passes two arguments and the
function's variables are in ``os.environ``; the embedded AWS passes each function's own
``environ``, because ``os.environ`` is shared by the threads of a Map.

Tracing: the functions have ``Tracing: Active`` (template.yaml Globals), so Lambda itself sends
each invocation's segment (init, invocation, overhead) to X-Ray, linked to the Step Functions
execution's trace. Powertools' Tracer is not created by default: importing aws_xray_sdk and patching
botocore cost about 200 ms of every cold start (bench/lambda_bundle.py), more than a handler's own
work, for one subsegment per AWS call. Set ``WF_TRACE_AWS_CALLS=true`` on a function to get those
subsegments while investigating; the layer ships aws_xray_sdk.
Keep this module's imports light: every handler pays for them at each cold start, and a handler
imports what only its call needs inside the call (tests/test_lambda_bundle.py checks which).
"""

from __future__ import annotations

import functools
import os
import threading
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics

# Most handlers publish no metric on most calls; Powertools would warn about that every time.
warnings.filterwarnings("ignore", message="No application metrics to publish")

logger = Logger(service="wheelfoundry")


def _tracer() -> Any:
    """Powertools' Tracer only where WF_TRACE_AWS_CALLS asks for it (see the module's docstring)."""
    if os.environ.get("WF_TRACE_AWS_CALLS", "").lower() != "true":
        return None
    from aws_lambda_powertools import Tracer

    return Tracer(service="wheelfoundry")


tracer = _tracer()
metrics = Metrics(namespace="WheelFoundry", service="wheelfoundry")

Handler = Callable[..., dict[str, Any]]


@dataclass
class Runtime:
    """One invocation's configuration, and the clients of its execution environment (shared_client)."""

    environ: Mapping[str, str]

    def var(self, name: str, default: str | None = None) -> str:
        value = self.environ.get(name, default)
        if value is None:
            raise KeyError(f"the function's environment lacks {name}")
        return value

    @property
    def region(self) -> str:
        return self.environ.get("AWS_REGION") or self.environ.get("AWS_DEFAULT_REGION") or "us-east-1"

    def client(self, service: str) -> Any:
        return shared_client(service, self.region)


_SHARED: dict[tuple[str, ...], Any] = {}
_SHARED_LOCK = threading.Lock()


def shared_client(service: str, region: str) -> Any:
    """One client per service, region and endpoint for the life of the execution environment.

    AWS's advice for Lambda: warm invocations reuse what the first one built, since a client costs
    tens of milliseconds of CPU to create (the embedded AWS, where every handler shares one process,
    spent 17 of 64 samples there under 100 runs at once). Credentials come from boto3's default
    session, which resolves them once, as before; a new default session gets new clients. Clients are
    thread-safe; creating them through that session is not, hence the lock. Never at import."""
    with _SHARED_LOCK:
        if boto3.DEFAULT_SESSION is None:
            boto3.setup_default_session()
        session = boto3.DEFAULT_SESSION
        key = (service, region, os.environ.get("AWS_ENDPOINT_URL", ""), str(id(session)))
        if key not in _SHARED:
            _SHARED[key] = session.client(service, region_name=region)
        return _SHARED[key]


def entrypoint(fn: Callable[[dict[str, Any], Runtime], dict[str, Any]]) -> Handler:
    """Wrap a ``fn(event, runtime)`` as a Lambda handler with Powertools logging, metrics, tracing."""

    @functools.wraps(fn)
    def handler(event: dict[str, Any], context: Any, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        return fn(event, Runtime(environ if environ is not None else os.environ))

    wrapped = handler if tracer is None else tracer.capture_lambda_handler(handler, capture_response=False)
    wrapped = metrics.log_metrics(wrapped)
    wrapped = logger.inject_lambda_context(wrapped, clear_state=True)
    return wrapped
