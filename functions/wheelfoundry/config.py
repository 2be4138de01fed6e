"""Farm configuration (``data/config.toml``): instances, CodeBuild types, prices, estimates, guardrails."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class InstanceType:
    name: str
    arch: str
    vcpus: int
    memory_gib: float
    usd_per_hour: float


@dataclass(frozen=True)
class GpuType:
    """An instance type the GPU test step can use (config.toml [gpu_types])."""

    name: str
    gpu: str
    capability: tuple[int, int]
    usd_per_hour: float
    vcpus: int = 0  # what the instance counts against its EC2 vCPU quota (wheelfoundry.planning.quotas)


@dataclass(frozen=True)
class ComputeType:
    """A CodeBuild on-demand compute type for one architecture (config.toml [codebuild])."""

    name: str  # BUILD_GENERAL1_SMALL
    arch: str  # x86_64 (LINUX_CONTAINER) or aarch64 (ARM_CONTAINER)
    vcpus: int
    memory_gib: float
    disk_gb: int
    usd_per_minute: float


@dataclass(frozen=True)
class CodeBuildLimits:
    max_build_minutes: int
    reserve_gib: float
    disk_gb: Mapping[str, int]  # job kind (pytorch, extension) -> disk it needs
    compute_types: Mapping[str, tuple[ComputeType, ...]]  # arch -> types, smallest first


@dataclass(frozen=True)
class Guardrails:
    max_jobs: int
    max_instance_hours: float
    hard_max_jobs: int
    max_gpu_hours: float = 8.0
    max_concurrent_jobs: int = 10  # the Build Map's MaxConcurrency: jobs beyond it wait for a lane


@dataclass(frozen=True)
class FarmConfig:
    guardrails: Guardrails
    max_hours: float
    gib_per_compile_job: Mapping[str, float]
    reserve_gib: float
    max_jobs_cap: int
    instances: Mapping[str, str]  # target kind -> instance type name
    instance_types: Mapping[str, InstanceType]
    spot_factor: float
    estimates: Mapping[str, Any]
    toolchain: Mapping[str, str]
    root_volume_usd_per_hour: float
    codebuild: CodeBuildLimits
    gpu_types: Mapping[str, GpuType]
    gpu_test_instance: str  # the GPU test step's default instance type
    gpu_test_hours: float  # and its default limit per job
    gib_per_nvcc_thread: float = 1.0  # memory of each further nvcc --threads thread
    max_wall_hours: float = 1.0  # the stack's default options.max_wall_hours
    extension_instances: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # platform -> types
    extension_instances_measured: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # with a record

    def instance(self, name: str) -> InstanceType | None:
        return self.instance_types.get(name)

    def with_guardrails(
        self, max_jobs: int | None = None, max_instance_hours: float | None = None, max_concurrent: int | None = None
    ) -> FarmConfig:
        """Stack parameters override the file's guardrails, never past the hard cap."""
        rails = self.guardrails
        jobs = min(max_jobs if max_jobs is not None else rails.max_jobs, rails.hard_max_jobs)
        hours = max_instance_hours if max_instance_hours is not None else rails.max_instance_hours
        lanes = max_concurrent if max_concurrent is not None else rails.max_concurrent_jobs
        return replace(
            self, guardrails=replace(rails, max_jobs=jobs, max_instance_hours=hours, max_concurrent_jobs=lanes)
        )


def _load(data: Mapping[str, Any]) -> FarmConfig:
    rails = data["guardrails"]
    defaults = data["defaults"]
    return FarmConfig(
        guardrails=Guardrails(
            max_jobs=int(rails["max_jobs"]),
            max_instance_hours=float(rails["max_instance_hours"]),
            hard_max_jobs=int(rails["hard_max_jobs"]),
            max_gpu_hours=float(rails["max_gpu_hours"]),
            max_concurrent_jobs=int(rails.get("max_concurrent_jobs", 10)),
        ),
        max_hours=float(defaults["max_hours"]),
        gib_per_compile_job={k: float(v) for k, v in defaults["gib_per_compile_job"].items()},
        reserve_gib=float(defaults["reserve_gib"]),
        max_jobs_cap=int(defaults["max_jobs_cap"]),
        instances=dict(data["instances"]),
        instance_types={
            name: InstanceType(
                name=name,
                arch=spec["arch"],
                vcpus=int(spec["vcpus"]),
                memory_gib=float(spec["memory_gib"]),
                usd_per_hour=float(spec["usd_per_hour"]),
            )
            for name, spec in data["instance_types"].items()
        },
        spot_factor=float(data["pricing"]["spot_factor"]),
        estimates=dict(data["estimates"]),
        toolchain={k: str(v) for k, v in data["toolchain"].items()},
        root_volume_usd_per_hour=float(data["pricing"]["ec2_root_volume_usd_per_hour"]),
        codebuild=_codebuild(data["codebuild"]),
        gpu_types={
            name: GpuType(
                name,
                spec["gpu"],
                _capability(spec["capability"]),
                float(spec["usd_per_hour"]),
                int(spec.get("vcpus", 0)),
            )
            for name, spec in data["gpu_types"].items()
        },
        gpu_test_instance=str(data["gpu_test"]["instance_type"]),
        gpu_test_hours=float(data["gpu_test"]["max_hours"]),
        gib_per_nvcc_thread=float(defaults["gib_per_nvcc_thread"]),
        max_wall_hours=float(defaults["max_wall_hours"]),
        extension_instances={k: tuple(v) for k, v in data["layout"]["extension_instances"].items()},
        extension_instances_measured={
            k: tuple(v) for k, v in data["layout"].get("extension_instances_measured", {}).items()
        },
    )


def _capability(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


def _codebuild(data: Mapping[str, Any]) -> CodeBuildLimits:
    types = {
        arch: tuple(
            sorted(
                (
                    ComputeType(
                        name=name,
                        arch=arch,
                        vcpus=int(spec["vcpus"]),
                        memory_gib=float(spec["memory_gib"]),
                        disk_gb=int(spec["disk_gb"]),
                        usd_per_minute=float(spec["usd_per_minute"]),
                    )
                    for name, spec in by_name.items()
                ),
                key=lambda t: (t.usd_per_minute, t.vcpus),
            )
        )
        for arch, by_name in data["compute_types"].items()
    }
    return CodeBuildLimits(
        max_build_minutes=int(data["max_build_minutes"]),
        reserve_gib=float(data["reserve_gib"]),
        disk_gb={k: int(v) for k, v in data["disk_gb"].items()},
        compute_types=types,
    )


@cache
def load_config() -> FarmConfig:
    text = resources.files("wheelfoundry").joinpath("data/config.toml").read_text(encoding="utf-8")
    return _load(tomllib.loads(text))
