"""Where each job runs: EC2 (one instance per job) or CodeBuild (a container billed per minute).

Pure: a Job and the FarmConfig in, the choice and the reason for it out. ``planning.plan_request``
applies ``assign`` to every job after the framework and extension planners, so they know nothing
about executors.

Cost model. A job's estimate is hours on its EC2 instance (the planner's model: linear in cores).
On a CodeBuild compute type those hours scale by the cores the job can use on each machine: the
cores that memory allows at ``gib_per_compile_job`` each, and for an extension job no more than
``extension_cores_per_cell`` times its nvcc threads per cell. So a one-cell extension takes as long on
a 2-vCPU container as on a 16-vCPU instance, and a PyTorch build fits only CodeBuild's largest types. EC2's price is
the instance (spot by ``spot_factor``) plus its root volume; CodeBuild's is started minutes times
the type's per-minute price.

``auto``: CodeBuild when a compute type of the job's architecture has the disk, the memory for one
compile job and a finish inside CodeBuild's build timeout and the job's ``max_hours``, and costs
no more than EC2 (compared in cents, as ``plan`` prints them; a tie goes to CodeBuild: no instance
to boot, no agent to wait for). The cheapest such type. Otherwise EC2.
``ec2`` / ``codebuild``: honoured, or ExecutorRefused naming the job and why CodeBuild cannot run it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from wheelfoundry.config import ComputeType, FarmConfig
from wheelfoundry.errors import Issue, RequestInvalid
from wheelfoundry.planning.jobs import Estimate, Job

Executor = Literal["ec2", "codebuild"]


class ExecutorRefused(RequestInvalid):
    """options.executor names an executor that cannot run one of the request's jobs."""


@dataclass(frozen=True)
class Priced:
    """One CodeBuild compute type for one job: how long, how much, or why it cannot run it."""

    compute: ComputeType
    hours: float
    usd: float
    max_jobs: int  # parallel compile jobs its memory and cores allow
    problem: str | None  # None: it can run the job


@dataclass(frozen=True)
class Choice:
    executor: Executor
    estimate: Estimate
    reason: str
    codebuild: Priced | None = None  # the compute type, when executor == "codebuild"


def _per_job_gib(job: Job, config: FarmConfig) -> float:
    return config.gib_per_compile_job["cuda" if job.accelerator == "cuda" else "cpu"]


def width(job: Job, config: FarmConfig) -> int | None:
    """Cores the job can keep busy; None: every core memory allows (a framework build)."""
    if job.extension is None:
        return None
    per_cell = int(config.estimates["extension_cores_per_cell"]["cuda" if job.cuda else "cpu"])
    return max(1, len(job.extension.cells) * per_cell * job.extension.nvcc_threads)


def _compile_jobs(vcpus: int, memory_gib: float, reserve_gib: float, per_job: float, config: FarmConfig) -> int:
    """Compile jobs that fit at once (0: not even one fits beside the reserve)."""
    return max(0, min(vcpus, math.floor((memory_gib - reserve_gib) / per_job), config.max_jobs_cap))


def price(job: Job, compute: ComputeType, config: FarmConfig) -> Priced:
    """What running ``job`` on ``compute`` takes and costs, or why it cannot run there."""
    per_job, limits, cap = _per_job_gib(job, config), config.codebuild, width(job, config)
    on_ec2 = _compile_jobs(job.instance.vcpus, job.instance.memory_gib, config.reserve_gib, per_job, config)
    jobs = _compile_jobs(compute.vcpus, compute.memory_gib, limits.reserve_gib, per_job, config)
    if jobs < 1:
        need = per_job + limits.reserve_gib
        short = f"{compute.name} has {compute.memory_gib:g} GiB, one compile job needs {need:g} GiB"
        return Priced(compute, math.inf, math.inf, 0, short)
    cores_ec2 = max(1, on_ec2 if cap is None else min(on_ec2, cap))
    cores = jobs if cap is None else min(jobs, cap)
    hours = job.estimate.hours * cores_ec2 / cores
    minutes = math.ceil(round(hours * 60, 6))
    usd = round(minutes * compute.usd_per_minute, 2)
    disk = limits.disk_gb[job.kind]
    problem: str | None = None
    if compute.disk_gb < disk:
        problem = f"{compute.name} has {compute.disk_gb} GB of disk, a {job.kind} job needs {disk} GB"
    elif minutes > limits.max_build_minutes:
        limit = limits.max_build_minutes / 60
        problem = f"{compute.name} would take {hours:.1f} h, past CodeBuild's build timeout of {limit:g} h"
    elif minutes > job.options.max_hours * 60:
        problem = f"{compute.name} would take {hours:.1f} h, past options.max_hours {job.options.max_hours:g}"
    elif job.extension is not None and hours > max(job.options.max_wall_hours, job.estimate.hours):
        wall = job.options.max_wall_hours
        problem = f"{compute.name} would take {hours:.2f} h, past the run's max_wall_hours {wall:g}"
    return Priced(compute, round(hours, 2), usd, jobs, problem)


def _ec2_text(job: Job) -> str:
    market = "spot" if job.instance.spot else "on-demand"
    return f"ec2 {job.instance.type} {market} ${job.estimate.usd:.2f} ({job.estimate.hours:.2f} h)"


def _codebuild_text(priced: Priced) -> str:
    return f"codebuild {priced.compute.name} ${priced.usd:.2f} ({priced.hours:.2f} h)"


def _codebuild_choice(priced: Priced, reason: str) -> Choice:
    return Choice("codebuild", Estimate(priced.hours, priced.usd), reason, priced)


def choose(job: Job, config: FarmConfig) -> Choice:
    """The executor for ``job`` under its options.executor, or ExecutorRefused."""
    requested = job.options.executor
    if requested == "ec2":
        return Choice("ec2", job.estimate, f"options.executor is 'ec2': {_ec2_text(job)}")
    types = config.codebuild.compute_types.get(job.platform, ())
    priced = [price(job, compute, config) for compute in types]
    fitting = [p for p in priced if p.problem is None]
    best = min(fitting, key=lambda p: (p.usd, p.hours, p.compute.vcpus)) if fitting else None
    if best is None:
        largest = max(priced, key=lambda p: p.compute.vcpus, default=None)
        why = largest.problem if largest else f"no CodeBuild compute type for {job.platform}"
        if requested == "codebuild":
            issue = Issue(
                "options.executor",
                f"'codebuild' cannot build {job.id}: {why}",
                "codebuild",
                ("auto", "ec2"),
            )
            raise ExecutorRefused([issue])
        return Choice("ec2", job.estimate, f"no CodeBuild type fits ({why}): {_ec2_text(job)}")
    if requested == "codebuild":
        return _codebuild_choice(best, f"options.executor is 'codebuild': {_codebuild_text(best)}; {_ec2_text(job)}")
    if best.usd <= job.estimate.usd:
        return _codebuild_choice(best, f"{_codebuild_text(best)} <= {_ec2_text(job)}")
    return Choice("ec2", job.estimate, f"{_ec2_text(job)} < {_codebuild_text(best)}")


def assign(job: Job, config: FarmConfig) -> Job:
    """``job`` with its executor, compute type, estimate and the build variables that follow from them."""
    choice = choose(job, config)
    if choice.codebuild is None:
        return replace(job, executor="ec2", compute_type=None, executor_reason=choice.reason)
    priced = choice.codebuild
    env = dict(job.env)
    if "MAX_JOBS" in env:  # the planner sized it for the instance
        env["MAX_JOBS"] = str(priced.max_jobs)
    if "WF_RESERVE_GIB" in env:
        env["WF_RESERVE_GIB"] = f"{config.codebuild.reserve_gib:g}"
    extension = job.extension
    if extension is not None:
        extension = replace(extension, parallel_cells=max(1, min(len(extension.cells), priced.max_jobs)))
    return replace(
        job,
        executor="codebuild",
        compute_type=priced.compute.name,
        estimate=choice.estimate,
        env=env,
        extension=extension,
        executor_reason=choice.reason,
    )


def assign_all(jobs: tuple[Job, ...], config: FarmConfig) -> tuple[Job, ...]:
    """Every job on its executor, or one ExecutorRefused naming every job CodeBuild cannot build."""
    out: list[Job] = []
    issues: list[Issue] = []
    for job in jobs:
        try:
            out.append(assign(job, config))
        except ExecutorRefused as exc:
            issues += exc.issues
    if issues:
        raise ExecutorRefused(issues)
    return tuple(out)
