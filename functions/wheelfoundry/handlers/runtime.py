"""What every handler shares: Powertools, the function's environment, and AWS clients.

Handlers are ``handler(event, context, environ=None)``: Lambda passes two arguments and the
function's variables are in ``os.environ``; the embedded AWS passes each function's own
``environ``, because ``os.environ`` is shared by the threads of a Map.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer

# Most handlers publish no metric on most calls; Powertools would warn about that every time.
warnings.filterwarnings("ignore", message="No application metrics to publish")

logger = Logger(service="wheelfoundry")
tracer = Tracer(service="wheelfoundry")
metrics = Metrics(namespace="WheelFoundry", service="wheelfoundry")

Handler = Callable[..., dict[str, Any]]


@dataclass
class Runtime:
    """One invocation's configuration and lazily created clients."""

    environ: Mapping[str, str]
    _clients: dict[str, Any] = field(default_factory=dict)

    def var(self, name: str, default: str | None = None) -> str:
        value = self.environ.get(name, default)
        if value is None:
            raise KeyError(f"the function's environment lacks {name}")
        return value

    @property
    def region(self) -> str:
        return self.environ.get("AWS_REGION") or self.environ.get("AWS_DEFAULT_REGION") or "us-east-1"

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = boto3.client(service, region_name=self.region)
        return self._clients[service]


def entrypoint(fn: Callable[[dict[str, Any], Runtime], dict[str, Any]]) -> Handler:
    """Wrap a ``fn(event, runtime)`` as a Lambda handler with Powertools logging, metrics, tracing."""

    @functools.wraps(fn)
    def handler(event: dict[str, Any], context: Any, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        return fn(event, Runtime(environ if environ is not None else os.environ))

    wrapped = tracer.capture_lambda_handler(handler, capture_response=False)
    wrapped = metrics.log_metrics(wrapped)
    wrapped = logger.inject_lambda_context(wrapped, clear_state=True)
    return wrapped
