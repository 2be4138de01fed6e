"""Typed, frozen forms of a validated build request.

These mirror ``data/request.schema.json`` field for field (tests/test_schema_model.py proves it):
the schema says what may be written, these say what the code works with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from wheelfoundry.request.publish_targets import PublishTarget

Platform = Literal["x86_64", "aarch64"]
Accelerator = Literal["cpu", "cuda"]


@dataclass(frozen=True)
class TargetSpec:
    platform: Platform = "x86_64"
    accelerator: Accelerator = "cpu"
    cuda: str | None = None
    arch_list: str | None = None
    mkldnn: bool | None = None  # None: as upstream built the release (catalog aarch64_mkldnn; x86_64: on)
    acl: bool | None = None  # aarch64 only; follows mkldnn when unset
    instance_type: str | None = None


@dataclass(frozen=True)
class PackageSpec:
    name: str
    ref: str | None = None  # git ref overriding the catalog's pairing
    version: str | None = None  # exact version overriding the catalog's pairing


@dataclass(frozen=True)
class GpuTestOption:
    """``options.gpu_test``: test each CUDA job's wheels on a GPU before publishing them."""

    instance_type: str
    max_hours: float
    spot: bool = True


@dataclass(frozen=True)
class Options:
    mpi: bool = True
    spot: bool = True
    keep_on_failure: bool = False
    max_hours: float = 8.0
    executor: Literal["auto", "ec2", "codebuild"] = "auto"  # auto: per job (wheelfoundry.planning.executors)
    gpu_test: GpuTestOption | None = None  # None: CUDA wheels are published untested on a GPU
    max_wall_hours: float = 1.0  # the run's expected wall time extension cells are fanned out to meet
    publish: PublishTarget | None = None  # None: the stack's own index only (no upload)


@dataclass(frozen=True)
class ImageWheel:
    """A wheel for a runtime image: a project from this run's channel, or a channel of the index."""

    package: str
    version: str | None = None  # None: the newest matching wheel in the channel (this run's build)
    channel: str | None = None  # None: the run's channel


@dataclass(frozen=True)
class RuntimeImage:
    """``image``: runtime images built from the run's wheels (wheelfoundry.request.images)."""

    base: Literal["auto", "slim", "cuda"] = "auto"
    python: tuple[str, ...] | None = None  # None: every Python of the run
    cuda: tuple[str, ...] | None = None  # None: every variant of the run ("cpu" or a CUDA version)
    wheels: tuple[ImageWheel, ...] | None = None  # None: every package the run builds
    pip: tuple[str, ...] = ()
    uid: int = 1000
    gid: int = 1000
    user: str = "wf"
    tz: str = "UTC"
    gpu_cc: str | None = None  # TORCH_CUDA_ARCH_LIST, normalized ("8.0;8.6"); arch_list is its other spelling
    arch_list: str | None = None
    tag: str = "{run}-torch{torch}-{variant}-py{python}"


@dataclass(frozen=True)
class BuildRequest:
    """``framework: pytorch``: torch and its domain libraries."""

    version: str
    python: tuple[str, ...]
    targets: tuple[TargetSpec, ...]
    packages: tuple[PackageSpec, ...] | None  # None: the catalog's pairing for the version
    options: Options
    channel: str
    framework: Literal["pytorch"] = "pytorch"
    image: RuntimeImage | None = None
    # options.max_wall_hours as the request gave it (None: not given): a framework build is planned to meet
    # it only when asked (wheelfoundry.planning.framework_wall); an extension's plan always meets the stack's default.
    wall_target: float | None = None


@dataclass(frozen=True)
class ExtensionSource:
    s3: str | None = None
    git: str | None = None
    ref: str | None = None
    subdirectory: str | None = None


@dataclass(frozen=True)
class ExtensionTest:
    """The package's own tests, run against the published wheel in every cell (cibuildwheel's test-command)."""

    command: tuple[str, ...]  # python's arguments; {project}: the source's root, {package}: its subdirectory
    requires: tuple[str, ...] = ()  # PEP 508 requirements pip installs first (pytest, scipy, ...)


@dataclass(frozen=True)
class ExtensionRequest:
    """``framework: extension``: a user's torch C++/CUDA extension across torch x CUDA x Python."""

    name: str
    source: ExtensionSource
    torch: tuple[str, ...]
    cuda: tuple[str, ...]
    python: tuple[str, ...]
    platforms: tuple[Platform, ...]
    arch_list: str | None
    torch_index: Literal["pytorch", "pip"]
    local_version: bool
    options: Options
    layout: Literal["auto", "merged", "per-cell"]
    require_all_cells: bool
    channel: str
    framework: Literal["extension"] = "extension"
    image: RuntimeImage | None = None
    test: ExtensionTest | None = None
    build_env: tuple[tuple[str, str], ...] = ()  # (name, value), sorted: the package's own build switches
    # cells of the matrix left out (wheelfoundry.request.exclusions): each entry's sorted (key, value) pairs
    exclude: tuple[tuple[tuple[str, str], ...], ...] = ()
    abi: Literal["auto", "per-torch", "stable"] = "auto"  # stable: a cell whose files are not is refused
    abi_build: Literal["oldest", "newest"] = "oldest"  # stable: the range's torch each build compiles against
    retest: tuple[str, ...] = ()  # published stable wheels (keys) tested on the cells, with no build


Request = BuildRequest | ExtensionRequest
