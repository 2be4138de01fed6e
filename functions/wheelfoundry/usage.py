"""Instance sizing for extension jobs from what earlier builds of the same source used.

A job's manifest records its compile stages' CPU and wall seconds (``compile_usage``, written by the
runner: buildspecs/wfbuild/cpu_usage.py). From one record: the cores a compiling cell keeps busy
(``cores_per_stage``, its width) and the CPU seconds a cell costs. ``size_extension`` tries every
instance of the configured extension instance's family and architecture: cells at once (as many as
fit at that width, memory permitting), rounds of cells, the compile wall time, and cores busy = CPU /
(wall x vCPUs). It keeps the fastest instance that stays >= ``TARGET`` busy, else the busiest one.
Without a record the planner keeps the configured instance and says what it expects instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wheelfoundry.config import FarmConfig, InstanceType
from wheelfoundry.jobs import InstanceChoice

TARGET = 0.9  # cores busy the compile stage should keep


@dataclass(frozen=True)
class RecordedUsage:
    source: str  # usage_key(): the package, where its source came from, and the target
    cpu_seconds: float
    wall_seconds: float
    cores: int
    stages: int  # compile stages (cells) the record covers
    cores_per_stage: float  # cores one compiling cell kept busy

    @property
    def cpu_per_cell(self) -> float:
        return self.cpu_seconds / max(1, self.stages)


@dataclass(frozen=True)
class Sizing:
    instance: InstanceType
    parallel_cells: int
    cores_busy: float
    wall_hours: float  # setup and compile on this instance
    usd: float
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "instance": self.instance.name,
            "vcpus": self.instance.vcpus,
            "parallel_cells": self.parallel_cells,
            "cores_busy": round(self.cores_busy, 3),
            "wall_hours": round(self.wall_hours, 3),
            "instance_hours": round(self.wall_hours, 3),  # one instance per job
            "usd": round(self.usd, 3),
            "reason": self.reason,
        }


def usage_key(name: str, repo: str, ref: str, target: str) -> str:
    return f"{name}|{repo}|{ref}|{target}"


def from_manifest(manifest: Mapping[str, Any]) -> RecordedUsage | None:
    """The record a job's manifest.json holds, or None (an older manifest, or no compile stage ran)."""
    usage = manifest.get("compile_usage")
    if not isinstance(usage, Mapping) or not usage.get("cores_per_stage"):
        return None
    sources = manifest.get("sources") or {}
    name = next(iter(sources), "")
    source = sources.get(name) or {}
    key = usage_key(name, str(source.get("repo") or ""), str(source.get("ref") or ""), str(manifest.get("target")))
    return RecordedUsage(
        key,
        float(usage["cpu_seconds"]),
        float(usage["wall_seconds"]),
        int(usage["cores"]),
        int(usage["stages"]),
        float(usage["cores_per_stage"]),
    )


def _choice(spec: InstanceType, spot: bool) -> InstanceChoice:
    return InstanceChoice(spec.name, spec.arch, spec.vcpus, spec.memory_gib, spec.usd_per_hour, spot)


def evaluate(
    spec: InstanceType, cells: int, usage: RecordedUsage, accelerator: str, config: FarmConfig, spot: bool = False
) -> Sizing:
    """``cells`` cells of the recorded width on ``spec``: cells at once, cores busy, hours and cost."""
    from wheelfoundry.sizing import ec2_usd_per_hour

    per_job = config.gib_per_compile_job["cuda" if accelerator == "cuda" else "cpu"]
    by_memory = max(1, math.floor((spec.memory_gib - config.reserve_gib) / per_job))
    width = max(0.01, usage.cores_per_stage)
    at_once = max(1, min(cells, math.floor(spec.vcpus / width) or 1, by_memory))
    cell_width = min(width, spec.vcpus / at_once)  # a cell never gets more cores than its share
    cell_hours = usage.cpu_per_cell / cell_width / 3600
    compile_hours = math.ceil(cells / at_once) * cell_hours
    busy = min(1.0, cells * usage.cpu_per_cell / 3600 / (compile_hours * spec.vcpus))
    hours = float(config.estimates["setup"]) + compile_hours
    usd = hours * ec2_usd_per_hour(_choice(spec, spot), config)
    reason = (
        f"{cells} cell(s) of {width:.1f} busy cores and {usage.cpu_per_cell:.0f} CPU-s each (recorded): "
        f"{at_once} at a time on {spec.vcpus} vCPUs keep {busy:.2f} of them busy"
    )
    return Sizing(spec, at_once, busy, hours, usd, reason)


def candidates(default: InstanceType, config: FarmConfig) -> list[InstanceType]:
    """The default's family (c7i: c7i.xlarge ... c7i.16xlarge) on its architecture, smallest first."""
    family = default.name.split(".")[0]
    found = [t for t in config.instance_types.values() if t.arch == default.arch and t.name.split(".")[0] == family]
    return sorted(found, key=lambda t: t.vcpus)


def default_sizing(cells: int, platform: str, accelerator: str, config: FarmConfig, usage: RecordedUsage) -> Sizing:
    """The configured extension instance, with this record (what the planner chose before sizing by it)."""
    spec = config.instance_types[config.instances[f"extension-{platform}"]]
    return evaluate(spec, cells, usage, accelerator, config)


def size_extension(
    cells: int, usage: RecordedUsage, platform: str, accelerator: str, config: FarmConfig, spot: bool = False
) -> Sizing:
    """The fastest instance of the family that keeps >= TARGET of its cores busy, else the busiest."""
    default = config.instance_types[config.instances[f"extension-{platform}"]]
    sized = [evaluate(spec, cells, usage, accelerator, config, spot) for spec in candidates(default, config)]
    busy = [s for s in sized if s.cores_busy >= TARGET]
    if busy:
        return min(busy, key=lambda s: (s.wall_hours, s.usd))
    return max(sized, key=lambda s: (round(s.cores_busy, 3), -s.usd))


def expected_busy(cells: int, vcpus: int, per_cell: float) -> float:
    """Cores busy without a record: each cell as wide as the config's extension_cores_per_cell."""
    return min(1.0, cells * per_cell / vcpus)
