"""A plan: the jobs of a validated request, its test jobs and runtime images, and what they cost.

Kept apart from wheelfoundry.planning.jobs (the job records) because a plan holds image jobs, and image
jobs are made of job records: jobs -> image_jobs -> plan, one direction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wheelfoundry.planning.image_jobs import ImageJob
from wheelfoundry.planning.jobs import Job
from wheelfoundry.request.model import Request


@dataclass(frozen=True)
class Plan:
    request: Request
    jobs: tuple[Job, ...]
    notes: tuple[str, ...]
    channel: str
    images: tuple[ImageJob, ...] = ()  # runtime images built after PublishIndex (wheelfoundry.planning.image_jobs)
    # an extension run's published bytes, tested after Merge (wheelfoundry.planning.testjobs)
    tests: tuple[Job, ...] = ()
    lanes: int = 10  # jobs the Build Map runs at once (guardrails.max_concurrent_jobs)

    @property
    def hours(self) -> float:
        spent: list[Job | ImageJob] = [*self.jobs, *self.tests, *self.images]
        return round(sum(j.estimate.hours for j in spent), 2)

    @property
    def usd(self) -> float:
        spent: list[Job | ImageJob] = [*self.jobs, *self.tests, *self.images]
        return round(sum(j.estimate.usd for j in spent), 2)

    @property
    def wall_hours(self) -> float:
        """Expected hours from start to the last job's end (the longest chain): the jobs over the Build Map's
        lanes (longest first), each job's GPU test at most, then the runtime images side by side."""
        lanes = [0.0] * max(1, min(self.lanes, len(self.jobs)))
        for job in sorted(self.jobs, key=lambda j: -j.estimate.hours):
            gpu = job.gpu_test.max_seconds / 3600 if job.gpu_test else 0.0
            lanes[lanes.index(min(lanes))] += job.estimate.hours + gpu
        return round(max(lanes) + max((i.estimate.hours for i in self.images), default=0.0), 2)

    def summary(self) -> dict[str, Any]:
        return {
            "channel": self.channel,
            "jobs": [j.id for j in self.jobs],
            "tests": [t.id for t in self.tests],
            "images": [i.id for i in self.images],
            "estimated_instance_hours": self.hours,
            "estimated_usd": self.usd,
            "estimated_wall_hours": self.wall_hours,
            "job_estimates": {j.id: {"hours": j.estimate.hours, "usd": j.estimate.usd} for j in self.jobs},
            "notes": list(self.notes),
        }
