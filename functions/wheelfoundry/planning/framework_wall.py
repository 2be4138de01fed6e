"""A framework request's ``options.max_wall_hours``: the cheapest layout of its jobs that meets it.

A PyTorch job builds every Python of one target in one tree, one after another (the second and later
Pythons reuse the first one's objects). Its wall time falls two ways: a larger instance of the same kind
(the build-time model is linear in cores: wheelfoundry.planning.sizing.estimate), or one instance per Python, each
building torch and the domain libraries for its Python alone (each pays the first build in full, so the
hours and dollars rise). Per target, every (instance type, split) is priced; the run's wall is its
longest job, so each target takes its cheapest layout within the target; when no layout of some target
meets it, that target takes its fastest, the others their cheapest within that wall, and a note says by
how much the best layout misses.
An instance type the request names (``targets[].instance_type``) is kept; only the split is chosen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from wheelfoundry.config import FarmConfig
from wheelfoundry.planning.jobs import Job
from wheelfoundry.request.model import BuildRequest, TargetSpec

Build = Callable[[TargetSpec, "tuple[str, ...] | None"], "tuple[Job, list[str]]"]


@dataclass(frozen=True)
class Layout:
    jobs: tuple[Job, ...]
    notes: tuple[str, ...]
    instance: str
    per_python: bool

    @property
    def wall(self) -> float:
        return max(j.estimate.hours for j in self.jobs)

    @property
    def usd(self) -> float:
        return round(sum(j.estimate.usd for j in self.jobs), 2)

    def describe(self) -> str:
        each = "one per Python" if self.per_python else "one"
        return f"{each} {self.instance}, {self.wall:.2f} h"


def instance_types(target: TargetSpec, default: str, config: FarmConfig) -> list[str]:
    """The default type and the larger ones of its architecture with at least its memory per vCPU."""
    if target.instance_type:
        return [target.instance_type]
    base = config.instance_types[default]
    per_cpu = base.memory_gib / base.vcpus
    larger = [
        t.name
        for t in config.instance_types.values()
        if t.arch == base.arch and t.vcpus > base.vcpus and t.memory_gib / t.vcpus >= per_cpu
    ]
    return [default, *sorted(larger, key=lambda n: config.instance_types[n].usd_per_hour)]


def target_layouts(request: BuildRequest, target: TargetSpec, build: Build, config: FarmConfig) -> list[Layout]:
    default_job, _ = build(target, None)
    found = []
    for name in instance_types(target, default_job.instance.type, config):
        sized = dataclasses.replace(target, instance_type=name)
        whole = build(sized, None)
        found.append(Layout((whole[0],), tuple(whole[1]), name, False))
        if len(request.python) > 1:
            parts = [build(sized, (p,)) for p in request.python]
            notes = tuple(n for _, ns in parts for n in ns)
            found.append(Layout(tuple(j for j, _ in parts), notes, name, True))
    return found


def layout(request: BuildRequest, build: Build, config: FarmConfig) -> tuple[tuple[Job, ...], list[str]]:
    target_wall = float(request.wall_target or 0.0)
    per_target = [target_layouts(request, t, build, config) for t in request.targets]
    # The run's wall is its slowest target's: where the target cannot be met, the others need not beat the
    # fastest wall of that one either, and take their cheapest layout within it.
    bound = max(target_wall, *(min(o.wall for o in options) for options in per_target))
    met = bound <= target_wall
    within = [[o for o in options if o.wall <= bound + 1e-9] for options in per_target]
    chosen = [min(options, key=lambda o: (o.usd, o.wall, len(o.jobs))) for options in within]
    jobs = tuple(j for o in chosen for j in o.jobs)
    notes = [n for o in chosen for n in o.notes]
    for option, default in zip(chosen, [options[0] for options in per_target], strict=True):
        if option is not default:
            notes.append(
                f"{option.jobs[0].id.rsplit('-cp', 1)[0] if option.per_python else option.jobs[0].id}: "
                f"{option.describe()} (instead of {default.describe()}) for max_wall_hours {target_wall:g}"
            )
    if not met:
        slowest = max(chosen, key=lambda o: o.wall)
        notes.append(
            f"max_wall_hours {target_wall:g} cannot be met: the fastest layout found takes {slowest.wall:.2f} h "
            f"({slowest.jobs[0].target}: {slowest.describe()}); no instance type or split per Python this "
            "stack knows is faster"
        )
    return jobs, notes
