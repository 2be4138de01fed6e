"""Build targets: their identifiers and the catalog checks that apply to one target."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from wheelfoundry.catalog.catalog import Catalog, CudaToolkit
from wheelfoundry.catalog.resolve import Resolved
from wheelfoundry.config import FarmConfig
from wheelfoundry.errors import Issue

ARCH = re.compile(r"^(?P<base>\d{1,2}\.\d)(?P<suffix>[af]?)(?P<ptx>\+PTX)?$")


def target_id(target: Mapping[str, Any]) -> str:
    """``cpu-x86_64``, ``cuda12.4-x86_64``, ``cpu-aarch64``: the target part of job ids."""
    accel = target.get("accelerator", "cpu")
    prefix = f"cuda{target.get('cuda')}" if accel == "cuda" else "cpu"
    return f"{prefix}-{target.get('platform', 'x86_64')}"


def variant(accelerator: str, cuda: str | None) -> str:
    """PyTorch's local-version label and index name: ``cpu`` or ``cu124``."""
    return "cpu" if accelerator != "cuda" or not cuda else "cu" + cuda.replace(".", "")


def split_arch_list(arch_list: str) -> list[str]:
    return [a for a in re.split(r"[; ]", arch_list) if a]


def check_arch_list(where: str, arch_list: str, toolkit: CudaToolkit) -> list[Issue]:
    issues = []
    for arch in split_arch_list(arch_list):
        match = ARCH.match(arch)
        if match is None:
            issues.append(Issue(where, f"{arch!r} is not a compute capability", arch, toolkit.archs))
            continue
        if match["base"] not in toolkit.archs:
            issues.append(Issue(where, f"CUDA {toolkit.version} cannot target {arch}", arch, toolkit.archs))
        elif match["suffix"] and float(match["base"]) < 9.0:
            issues.append(Issue(where, f"{arch}: the 'a'/'f' suffixes exist from compute capability 9.0", arch))
    return issues


def _check_cuda(where: str, target: Mapping[str, Any], resolved: Resolved, catalog: Catalog) -> list[Issue]:
    cuda = target.get("cuda")
    aarch64 = target.get("platform") == "aarch64"
    offered = resolved.aarch64_cuda if aarch64 else resolved.cuda
    if cuda is None:
        return [Issue(f"{where}.cuda", "required when accelerator is cuda", None, offered)]
    if aarch64 and cuda not in offered:
        why = f"CUDA {cuda} on aarch64 is not available for torch {resolved.spec} (upstream builds no such wheel)"
        return [Issue(f"{where}.cuda", why, cuda, offered)]
    if cuda not in resolved.cuda:
        return [Issue(f"{where}.cuda", f"CUDA {cuda} is not available for torch {resolved.spec}", cuda, resolved.cuda)]
    toolkit = catalog.cuda.get(cuda)
    usable = tuple(c for c in resolved.cuda if c in catalog.cuda and catalog.cuda[c].requirements)
    if toolkit is None:  # a CUDA newer than the catalog: a stack locks it for extension builds only
        why = f"CUDA {cuda} has no toolkit in the catalog, so torch cannot be built with it here"
        return [Issue(f"{where}.cuda", why, cuda, usable)]
    if not toolkit.requirements:
        return [
            Issue(
                f"{where}.cuda",
                f"CUDA {cuda} has no pinned nvidia-* wheels in the catalog, so a slim wheel cannot be built",
                cuda,
                usable,
            )
        ]
    arch_list = target.get("arch_list")
    return check_arch_list(f"{where}.arch_list", arch_list, toolkit) if isinstance(arch_list, str) else []


def check_target(
    where: str,
    target: Mapping[str, Any],
    resolved: Resolved,
    catalog: Catalog,
    config: FarmConfig,
    skip: set[str],
) -> list[Issue]:
    if any(path.startswith(where) for path in skip):
        return []
    issues: list[Issue] = []
    platform = target.get("platform", "x86_64")
    if target.get("accelerator") == "cuda":
        issues += _check_cuda(where, target, resolved, catalog)
    else:
        for key in ("cuda", "arch_list"):
            if target.get(key) is not None:
                issues.append(Issue(f"{where}.{key}", "applies only to accelerator cuda", target[key]))
    if target.get("acl") and platform != "aarch64":
        issues.append(Issue(f"{where}.acl", "Arm Compute Library is for aarch64 targets", True, ("false",)))
    if target.get("acl") and not target.get("mkldnn", True):
        issues.append(Issue(f"{where}.acl", "ACL is used through mkldnn: set mkldnn true or drop acl", True))
    instance = target.get("instance_type")
    if isinstance(instance, str):
        known = config.instance(instance)
        if known is None:
            issues.append(
                Issue(
                    f"{where}.instance_type",
                    f"{instance} is not in the price table",
                    instance,
                    tuple(config.instance_types),
                )
            )
        elif known.arch != platform:
            fitting = tuple(n for n, t in config.instance_types.items() if t.arch == platform)
            issues.append(
                Issue(f"{where}.instance_type", f"{instance} is {known.arch}, not {platform}", instance, fitting)
            )
    return issues
