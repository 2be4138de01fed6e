"""A request that passed validation (wheelfoundry.request.request), defaults filled, as the typed Request the
planner takes; and the GPU instance check the schema cannot make (it needs the farm's config)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wheelfoundry.catalog.catalog import Catalog
from wheelfoundry.config import FarmConfig
from wheelfoundry.errors import Issue
from wheelfoundry.request import exclusions, images, semantics
from wheelfoundry.request.model import (
    BuildRequest,
    ExtensionRequest,
    ExtensionSource,
    ExtensionTest,
    GpuTestOption,
    Options,
    PackageSpec,
    Request,
    TargetSpec,
)
from wheelfoundry.request.publish_targets import parse_target


def run_python(data: Mapping[str, Any], catalog: Catalog) -> tuple[str, ...]:
    """The Pythons a run builds, for checking ``image.python``; () when the request cannot say."""
    try:
        if isinstance(data.get("python"), list):
            return tuple(p for p in data["python"] if isinstance(p, str))
        if data.get("framework") == "extension":
            return tuple(semantics.default_extension_python(data, catalog))
        version = data.get("version") or catalog.newest_release().latest_patch()
        return semantics.supported_python(version, catalog) if isinstance(version, str) else ()
    except Exception:  # an unresolvable version or torch: reported by semantics.check
        return ()


def _test(value: Mapping[str, Any] | None) -> ExtensionTest | None:
    if not value:
        return None
    return ExtensionTest(command=tuple(value["command"]), requires=tuple(value.get("requires") or ()))


def _gpu_test(value: Any, spot: bool, config: FarmConfig) -> GpuTestOption | None:
    if value is False:
        return None
    given = value if isinstance(value, Mapping) else {}
    return GpuTestOption(
        instance_type=given.get("instance_type", config.gpu_test_instance),
        max_hours=float(given.get("max_hours", config.gpu_test_hours)),
        spot=bool(given.get("spot", spot)),
    )


def gpu_test_issues(options: Any, config: FarmConfig) -> list[Issue]:
    """An unknown GPU instance type, named before anything is launched (the schema checks the shape)."""
    value = options.get("gpu_test") if isinstance(options, Mapping) else None
    if not isinstance(value, Mapping) or not isinstance(value.get("instance_type"), str):
        return []
    name = value["instance_type"]
    if name in config.gpu_types:
        return []
    why = f"{name!r} is not a GPU instance type this farm knows (config.toml [gpu_types])"
    return [Issue("options.gpu_test.instance_type", why, name, tuple(sorted(config.gpu_types)))]


def _options(data: Mapping[str, Any], config: FarmConfig) -> Options:
    return Options(
        mpi=data["mpi"],
        spot=data["spot"],
        keep_on_failure=data["keep_on_failure"],
        max_hours=float(data["max_hours"]),
        executor=data["executor"],
        gpu_test=_gpu_test(data.get("gpu_test", False), data["spot"], config),
        max_wall_hours=float(data.get("max_wall_hours", config.max_wall_hours)),
        publish=parse_target(data.get("publish"))[0],
    )


def build(data: Mapping[str, Any], catalog: Catalog, config: FarmConfig) -> Request:
    if data.get("framework") == "extension":
        src = data["source"]
        return ExtensionRequest(
            name=data["name"],
            source=ExtensionSource(
                s3=src.get("s3"), git=src.get("git"), ref=src.get("ref"), subdirectory=src.get("subdirectory")
            ),
            torch=tuple(data["torch"]),
            cuda=tuple(data["cuda"]),
            python=tuple(data.get("python") or semantics.default_extension_python(data, catalog)),
            platforms=tuple(data["platforms"]),
            arch_list=data.get("arch_list"),
            torch_index=data["torch_index"],
            local_version=data["local_version"],
            layout=data["layout"],
            require_all_cells=data["require_all_cells"],
            options=_options(data["options"], config),
            channel=data.get("channel") or "extensions",
            image=images.parse(data.get("image")),
            test=_test(data.get("test")),
            build_env=tuple(sorted(data["build_env"].items())),
            exclude=exclusions.parse(data.get("exclude")),
            abi=data.get("abi", "auto"),
            abi_build=data.get("abi_build", "oldest"),
            retest=tuple(data.get("retest") or ()),
        )
    version = data.get("version") or catalog.newest_release().latest_patch()
    targets = tuple(
        TargetSpec(
            platform=t["platform"],
            accelerator=t["accelerator"],
            cuda=t.get("cuda"),
            arch_list=t.get("arch_list"),
            mkldnn=t.get("mkldnn"),
            acl=t.get("acl"),
            instance_type=t.get("instance_type"),
        )
        for t in data["targets"]
    )
    packages = None  # None: torch and every paired library that supports one of the Pythons
    if data.get("packages"):
        packages = tuple(
            PackageSpec(name=p) if isinstance(p, str) else PackageSpec(p["name"], p.get("ref"), p.get("version"))
            for p in data["packages"]
        )
    return BuildRequest(
        version=version,
        python=tuple(data.get("python") or semantics.supported_python(version, catalog)),
        targets=targets,
        packages=packages,
        options=_options(data["options"], config),
        channel=data.get("channel") or semantics.default_channel(version),
        image=images.parse(data.get("image")),
        wall_target=float(wall) if (wall := (data.get("options") or {}).get("max_wall_hours")) is not None else None,
    )
