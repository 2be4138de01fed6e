"""wheelfoundry_local: an embedded AWS (moto in-process, plus what moto lacks) for local runs and tests.

Public API: EmbeddedAws (session.py) and what it returns; see local/README.md.
"""

from .deploy import DeployedStack, DeployError, SkippedResource
from .events import Delivery
from .lambdas import Invocation
from .session import EmbeddedAws, ExecutionResult

__all__ = [
    "Delivery",
    "DeployError",
    "DeployedStack",
    "EmbeddedAws",
    "ExecutionResult",
    "Invocation",
    "SkippedResource",
]
