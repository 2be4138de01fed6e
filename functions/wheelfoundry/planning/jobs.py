"""Jobs: one instance building one (framework version, target) for all its Python versions.

``Job.to_dict()`` is the job contract: Validate writes it to S3 as ``job.json`` and the
on-instance runner (buildspecs/wfbuild) reads it. Its ``schema`` number changes when a
field's meaning does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from wheelfoundry.request.model import Options

JOB_SCHEMA = 3  # 2: extension jobs carry cells; 3: test jobs (the published bytes, wheelfoundry.planning.testjobs)
VersionScheme = Literal["fixed", "nightly", "git"]


@dataclass(frozen=True)
class StackContext:
    """Where the stack's resources are; the CLI plans with placeholders."""

    bucket: str = "<wheel-bucket>"
    region: str = "us-east-1"
    ecr_repository: str = "<builder-repository>"


@dataclass(frozen=True)
class PackagePin:
    """One package of a job, with exactly what to check out and how to version it."""

    name: str
    version: str  # exact release, or the moving ref / commit it was built from
    repo: str
    ref: str
    version_scheme: VersionScheme
    build_version: str | None  # PYTORCH_BUILD_VERSION / BUILD_VERSION when fixed
    python: tuple[str, ...]  # the job's Python versions this package supports
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ImageSpec:
    recipe: str  # buildspecs/images/<recipe>.Dockerfile
    base: str
    build_args: Mapping[str, str]
    manylinux: str  # auditwheel --plat


@dataclass(frozen=True)
class InstanceChoice:
    type: str
    arch: str
    vcpus: int
    memory_gib: float
    usd_per_hour: float
    spot: bool


@dataclass(frozen=True)
class Estimate:
    hours: float
    usd: float


@dataclass(frozen=True)
class GpuTestPlan:
    """The GPU test step of a CUDA job (options.gpu_test): where it runs, what it costs, whether it can."""

    instance_type: str
    gpu: str
    capability: str  # "8.9": what the job's arch list must cover
    spot: bool
    max_seconds: int
    usd: float  # the most it costs: max_seconds on the instance
    testable: bool  # False: the arch list holds no code this GPU runs; reported "not testable", never passed


@dataclass(frozen=True)
class SmokeSpec:
    """What the smoke test checks beyond import and a tensor op."""

    mpi: bool
    mkldnn: bool
    cuda_built: bool


@dataclass(frozen=True)
class CellSpec:
    """One build of an extension: one torch release for one Python (its job fixes platform and CUDA)."""

    id: str  # torch2.13.0-cp311-cpu-x86_64
    torch_version: str
    python: str
    local_label: str  # "pt213cpu": the cell wheel's +label, distinct within the run
    build_id: str  # "torch2.13-cpu": the folder holding this build inside a merged wheel
    # A test job's cells span CUDA variants: each names its own toolkit and the index its torch comes from.
    cuda: str | None = None
    torch_index_url: str | None = None
    # abi "stable": the oldest torch (X.Y) this build's wheel serves, its floor and torch>=; None: its own torch
    floor: str | None = None


@dataclass(frozen=True)
class ExtensionSpec:
    name: str
    source_s3: str | None
    source_git: str | None
    source_ref: str | None
    subdirectory: str | None
    torch_index_url: str | None  # None: the build host's pip configuration
    cells: tuple[CellSpec, ...]  # built in parallel on one host
    layout: Literal["auto", "merged", "per-cell"] = "auto"
    require_all_cells: bool = False
    label_wheels: bool = True  # per-cell layout without local versions: public versions only
    parallel_cells: int = 1  # the planner's expectation for the instance; the runner re-checks on the host
    nvcc_threads: int = 1  # likewise: nvcc --threads of each CUDA cell (wfbuild.compiling.parallelism)
    # A cell wheel's predicted bytes (wheelfoundry.planning.wheel_size): the source's recorded runs, else the model.
    cell_wheel_bytes: int = 0
    cell_wheel_recorded: bool = False
    # The package's own tests (request "test"), run by the test jobs against the published wheel.
    test_command: tuple[str, ...] = ()
    test_requires: tuple[str, ...] = ()
    # abi "stable": each cell's abi stage refuses it unless its files are stable with a floor <= the cell's own torch,
    # the oldest its wheel serves for its Python (wfbuild.stages.stages.stable_floor); abi_oldest records the
    # request's oldest torch (X.Y)
    abi: Literal["auto", "per-torch", "stable"] = "auto"
    abi_oldest: str | None = None
    # abi "stable": every cell the built wheels serve (each torch of the range, per Python), which the test
    # jobs install them into; empty: the cells themselves
    serves: tuple[CellSpec, ...] = ()
    # abi "stable" whose recorded wheels were abi3 / py3-none: one build (the oldest Python) serves every Python's
    # cells; Merge keeps only its own Python's cells if the wheel it made is tied to that Python after all
    python_free: bool = False


@dataclass(frozen=True)
class Job:
    id: str
    kind: Literal["pytorch", "extension", "test"]  # test: the published bytes of an extension run
    target: str  # cpu-x86_64, cuda12.4-x86_64, cpu-aarch64
    platform: str
    accelerator: str
    cuda: str | None
    arch_list: str | None
    variant: str  # cpu, cu124
    python: tuple[str, ...]
    packages: tuple[PackagePin, ...]
    image: ImageSpec
    instance: InstanceChoice
    env: Mapping[str, str]
    requirements: tuple[str, ...]  # slim CUDA wheels: pinned nvidia-* dependencies of torch
    smoke: SmokeSpec
    options: Options
    estimate: Estimate
    extension: ExtensionSpec | None = None
    # Where the job runs: chosen by the planner (wheelfoundry.planning.executors) from options.executor.
    executor: Literal["ec2", "codebuild"] = "ec2"
    compute_type: str | None = None  # CodeBuild compute type when executor == "codebuild"
    executor_reason: str = ""  # why: both executors' cost, or the limit that ruled CodeBuild out
    gpu_test: GpuTestPlan | None = None  # set by wheelfoundry.planning.gpu_tests for CUDA jobs that ask for it
    # Where the state machine relaunches an EC2 build once after CompilerOutOfMemory or BuildTimedOut: a type
    # with at least twice the memory (wheelfoundry.planning.sizing.larger_instance); None: the same type again.
    retry_instance: InstanceChoice | None = None

    @property
    def max_seconds(self) -> int:
        return int(self.options.max_hours * 3600)

    def wheel_ids(self) -> tuple[str, ...]:
        """``torch2.5.1-cp312-cuda12.4-x86_64``: one per package and Python version (an extension: its cells)."""
        if self.extension is not None:
            return tuple(cell.id for cell in self.extension.cells)
        return tuple(
            f"{pin.name}{pin.version[:12]}-cp{py.replace('.', '')}-{self.target}"
            for pin in self.packages
            for py in pin.python
        )

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = _plain(dataclasses.asdict(self))
        data["schema"] = JOB_SCHEMA
        data["wheel_ids"] = list(self.wheel_ids())
        data["max_seconds"] = self.max_seconds
        return data


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
