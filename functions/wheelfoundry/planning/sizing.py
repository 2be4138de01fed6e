"""Instance choice, parallel compile jobs and cost estimates."""

from __future__ import annotations

import math

from wheelfoundry.config import FarmConfig
from wheelfoundry.planning.jobs import Estimate, InstanceChoice


def choose_instance(kind: str, override: str | None, spot: bool, config: FarmConfig) -> InstanceChoice:
    name = override or config.instances[kind]
    spec = config.instance_types[name]
    return InstanceChoice(name, spec.arch, spec.vcpus, spec.memory_gib, spec.usd_per_hour, spot)


def max_jobs(instance: InstanceChoice, accelerator: str, config: FarmConfig, per_job: float | None = None) -> int:
    """Parallel compile jobs the instance's memory and cores allow (OOM kills are the usual failure);
    ``per_job``: memory of one (a source's recorded peak), else the model's."""
    per_job = per_job or config.gib_per_compile_job["cuda" if accelerator == "cuda" else "cpu"]
    by_memory = math.floor((instance.memory_gib - config.reserve_gib) / per_job)
    return max(1, min(instance.vcpus, by_memory, config.max_jobs_cap))


def larger_instance(instance: InstanceChoice, config: FarmConfig) -> InstanceChoice | None:
    """Where a job goes when one compiler alone was OOM-killed on ``instance`` (or it timed out): the cheapest
    type the farm plans with (config.toml [instances] and [layout]) of its architecture with at least twice its
    memory and as many cores; None: there is none."""
    planned = {*config.instances.values()}
    for names in (*config.extension_instances.values(), *config.extension_instances_measured.values()):
        planned |= set(names)
    bigger = [
        t
        for t in (config.instance_types[n] for n in sorted(planned) if n in config.instance_types)
        if t.arch == instance.arch and t.memory_gib >= 2 * instance.memory_gib and t.vcpus >= instance.vcpus
    ]
    if not bigger:
        return None
    pick = min(bigger, key=lambda t: (t.usd_per_hour, -t.memory_gib))
    return InstanceChoice(pick.name, pick.arch, pick.vcpus, pick.memory_gib, pick.usd_per_hour, instance.spot)


def ec2_usd_per_hour(instance: InstanceChoice, config: FarmConfig) -> float:
    """The instance (spot priced by spot_factor) and its root volume, which bills while it runs."""
    return instance.usd_per_hour * (config.spot_factor if instance.spot else 1.0) + config.root_volume_usd_per_hour


def estimate(hours: float, instance: InstanceChoice, config: FarmConfig) -> Estimate:
    """Hours on the reference 32-vCPU machine, scaled to this instance, priced with its root volume."""
    scaled = hours * 32 / instance.vcpus
    return Estimate(round(scaled, 2), round(scaled * ec2_usd_per_hour(instance, config), 2))
