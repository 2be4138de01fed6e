"""Each job's phase and elapsed time, read from what the embedded AWS records.

Phases follow the state machine: launching, waiting for the SSM agent, building (with the runner's
latest stage), collecting, then the outcome Terminate recorded; a CodeBuild job builds on CodeBuild
(with the runner's latest stage too: the local CodeBuild passes on its build's output as the agent
passes on a command's) until FinishBuild's StopBuild records the outcome.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .deploy import DeployedStack
from .lambdas import InvocationLog

STAGE_MARKER = "] stage "  # "[wfbuild 03:48:12] stage repair-wf-example-ops-3.11: succeeded in 0.9s"


@dataclass
class JobView:
    job_id: str
    phase: str = "launching"
    started: float = field(default_factory=time.monotonic)
    host: str | None = None  # the EC2 instance id, or the CodeBuild build id: whose output names the stage
    stage: str = ""
    done: bool = False
    ended: float | None = None  # when the job finished: its elapsed time stops there

    def finish(self, phase: str) -> None:
        self.phase, self.done, self.ended = phase, True, time.monotonic()

    def line(self) -> str:
        elapsed = int((self.ended or time.monotonic()) - self.started)
        detail = f" ({self.stage})" if self.stage and self.phase.startswith("building") else ""
        return f"  {self.job_id:<48} {self.phase + detail:<60} {elapsed // 60:d}:{elapsed % 60:02d}"


class Progress:
    """Fed by the agent's and the local CodeBuild's output callback and by polling the invocation log.

    ``update`` returns a job's line once per change of (phase, stage); ``still_running`` repeats the line
    of a job whose state has not changed for ``quiet`` seconds, so a long stage still shows its clock;
    a finished job's line is never printed again."""

    def __init__(self, run: str | None = None) -> None:
        self.run = run  # set: only that run's jobs (other runs of the same stack are not this one's to show)
        self._lock = threading.Lock()
        self.jobs: dict[str, JobView] = {}
        self._stage_by_host: dict[str, str] = {}
        self._reported: dict[str, tuple[str, str]] = {}
        self._printed_at: dict[str, float] = {}

    def on_output(self, host_id: str, command_id: str, line: str) -> None:
        """A line an instance's command or a CodeBuild build printed (``host_id``: instance or build id)."""
        if STAGE_MARKER in line:
            stage = line.split(STAGE_MARKER, 1)[1].split(":", 1)[0]
            with self._lock:
                self._stage_by_host[host_id] = stage

    def update(self, stack: DeployedStack, invocations: InvocationLog) -> list[str]:
        """Refresh from the invocation log; returns the lines that changed."""
        names = {
            stack.function_name(lid): lid
            for lid in (
                "LaunchFunction",
                "AwaitAgentFunction",
                "CollectFunction",
                "TerminateFunction",
                "StartBuildFunction",
                "StopBuildFunction",
            )
            if lid in stack.resources
        }
        by_host: dict[str | None, JobView] = {j.host: j for j in self.jobs.values() if j.host}
        for call in invocations.all():
            kind = names.get(call.function_name)
            event: dict[str, Any] = call.event if isinstance(call.event, dict) else {}
            job = self._job_for(kind, event, by_host)
            if job is None or job.done:
                continue
            if kind == "LaunchFunction" and call.ok:
                job.host = call.result.get("instance_id")
                job.phase = "waiting for the SSM agent"
                by_host[job.host] = job
            elif kind == "AwaitAgentFunction" and call.ok:
                job.phase = "building"
            elif kind == "CollectFunction" and call.ok:
                job.phase = "collecting"
            elif kind == "TerminateFunction" and call.ok:
                job.finish(f"{call.result.get('status')}, instance terminated")
            elif kind == "StartBuildFunction" and call.ok:
                job.host = call.result.get("build_id")
                job.phase = "building on CodeBuild"
                by_host[job.host] = job
            elif kind == "StopBuildFunction" and call.ok:
                job.finish(f"{call.result.get('status')}, build finished")
        changed = []
        now = time.monotonic()
        with self._lock:
            for job in self.jobs.values():
                job.stage = self._stage_by_host.get(job.host or "", "")
                if self._reported.get(job.job_id) != (job.phase, job.stage):
                    self._reported[job.job_id] = (job.phase, job.stage)
                    self._printed_at[job.job_id] = now
                    changed.append(job.line())
        return changed

    def still_running(self, quiet: float) -> list[str]:
        """The lines of unfinished jobs printed more than ``quiet`` seconds ago (their clock moved on)."""
        now, lines = time.monotonic(), []
        with self._lock:
            for job in self.jobs.values():
                if not job.done and now - self._printed_at.get(job.job_id, now) >= quiet:
                    self._printed_at[job.job_id] = now
                    lines.append(job.line())
        return lines

    def _job_for(self, kind: str | None, event: dict[str, Any], by_host: dict[str | None, JobView]) -> JobView | None:
        if kind in ("LaunchFunction", "CollectFunction", "StartBuildFunction"):
            job_id, run = event.get("job", {}).get("id"), event.get("run", {}).get("id")
        elif kind in ("TerminateFunction", "StopBuildFunction"):
            state = event.get("state", {})
            job_id, run = state.get("job", {}).get("id"), state.get("run", {}).get("id")
        elif kind == "AwaitAgentFunction":
            return by_host.get(event.get("instance_id"))
        else:
            return None
        if not job_id or (self.run is not None and run != self.run):
            return None
        return self.jobs.setdefault(job_id, JobView(job_id))

    def lines(self) -> list[str]:
        return [job.line() for job in self.jobs.values()]
