"""The typed error hierarchy.

A Lambda error's class name becomes the Step Functions error name, so the ASL's
Retry/Catch clauses match on these names. Renaming a class is an interface change:
tests/test_asl.py checks that every name the ASL matches on exists here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


class WheelFoundryError(Exception):
    """Base of every error this project raises on purpose."""


# --- Request validation: raised before anything is launched -------------------------


@dataclass(frozen=True)
class Issue:
    """One problem with a request: where it is, what was there, what is allowed."""

    path: str
    message: str
    value: object = None
    allowed: tuple[str, ...] = ()

    def __str__(self) -> str:
        text = f"{self.path or '(request)'}: {self.message}"
        if self.allowed:
            text += f" (allowed: {', '.join(self.allowed)})"
        return text


class RequestInvalid(WheelFoundryError):
    """The request breaks the schema or the catalog; carries every problem at once."""

    def __init__(self, issues: Iterable[Issue], what: str = "the build request"):
        self.issues: tuple[Issue, ...] = tuple(issues)
        count = len(self.issues)
        lines = "\n".join(f"  - {issue}" for issue in self.issues)
        super().__init__(f"{count} problem{'s' if count != 1 else ''} in {what}:\n{lines}")


class SubscriptionInvalid(RequestInvalid):
    """A subscription breaks its schema, or its build fields would make every request it starts invalid."""

    def __init__(self, issues: Iterable[Issue]):
        super().__init__(issues, "the subscription")


class GuardrailExceeded(RequestInvalid):
    """The request is valid but bigger than this stack allows (jobs or instance-hours)."""


class QuotaTooSmall(RequestInvalid):
    """An EC2 vCPU quota of this account is smaller than one of the plan's instances: it could never start."""


# --- Infrastructure: launching, waiting, collecting ------------------------------------


class CapacityUnavailable(WheelFoundryError):
    """EC2 had no capacity for the instance type right now; worth a retry."""


class VcpuQuotaWait(WheelFoundryError):
    """RunInstances hit the account's vCPU quota (VcpuLimitExceeded, MaxSpotInstanceCountExceeded) while other
    instances hold it: the job waits its turn (the ASL retries with backoff)."""


class QuotaWaitTimedOut(WheelFoundryError):
    """The job waited for vCPU quota longer than the run allows; nothing was launched."""


class LaunchFailed(WheelFoundryError):
    """RunInstances failed for a reason a retry will not fix."""


class AgentNotReady(WheelFoundryError):
    """The instance's SSM agent has not registered yet; the ASL retries with backoff."""


class InstanceLost(WheelFoundryError):
    """The instance stopped or terminated before its build finished."""


class SpotInterrupted(WheelFoundryError):
    """EC2 reclaimed the spot instance; the ASL relaunches the job on demand."""


class BuildFailed(WheelFoundryError):
    """The build on the instance failed; the cause carries the log tail."""


class CompilerOutOfMemory(BuildFailed):
    """The kernel's OOM killer ended a compiler of a cell already built one compiler at a time (the runner
    retries with fewer at once before this): the ASL relaunches the job once on its larger instance."""


class BuildTimedOut(BuildFailed):
    """The build reached its time limit (the runner's deadline, or SSM's execution timeout): the ASL relaunches
    the job once; its compiler cache keeps the units the first attempt finished."""


class BuildCommandFailed(WheelFoundryError):
    """SSM reported the build command Failed, TimedOut or Cancelled before it called back."""


class ManifestInvalid(WheelFoundryError):
    """The manifest an instance wrote is missing, malformed or disagrees with the wheels."""


class ProvenanceInvalid(WheelFoundryError):
    """A published wheel whose bytes, manifest or provenance envelope do not match (nothing is signed)."""


class PublishFailed(WheelFoundryError):
    """The upload to the publish target could not run or the index refused it (credentials, network, twine)."""


class IndexConflict(WheelFoundryError):
    """Other runs kept publishing into the channel while this one rewrote its index; the ASL retries."""


class PublishedNameReused(WheelFoundryError):
    """A wheel name the channel has published would get other bytes (PEP 592: withdraw by yanking, never reuse)."""


class EdgeInvalidationFailed(WheelFoundryError):
    """CloudFront refused or lost a public channel's invalidation (throttled, too many in progress, down):
    the channel's state is not written, so the ASL's retry publishes and invalidates again."""


class MergedWheelFailed(WheelFoundryError):
    """A merged wheel failed the test of its published bytes in a run that left the layout to the farm
    (``layout: auto``): Attest signs nothing and the state machine stages the cell wheels instead."""


class JobsFailed(WheelFoundryError):
    """Raised by Report when one or more jobs failed; names each one and why."""

    def __init__(self, failures: Sequence[tuple[str, str, str]]):
        self.failures = tuple(failures)
        parts = [f"{job}: {error}: {cause}" for job, error, cause in self.failures]
        super().__init__(f"{len(self.failures)} job(s) failed: " + " | ".join(parts))


#: Names the state machine matches on; tests check the ASL against this list.
ASL_ERROR_NAMES = frozenset(
    cls.__name__
    for cls in (
        RequestInvalid,
        GuardrailExceeded,
        QuotaTooSmall,
        CapacityUnavailable,
        VcpuQuotaWait,
        QuotaWaitTimedOut,
        LaunchFailed,
        AgentNotReady,
        InstanceLost,
        SpotInterrupted,
        BuildFailed,
        CompilerOutOfMemory,
        BuildTimedOut,
        BuildCommandFailed,
        ManifestInvalid,
        MergedWheelFailed,
        IndexConflict,
        EdgeInvalidationFailed,
        JobsFailed,
    )
)
