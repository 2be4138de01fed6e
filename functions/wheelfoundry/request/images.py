"""The request's ``image`` section: typed form and the checks the schema cannot express.

Pure: no AWS, no I/O. ``check`` tolerates any JSON value (the schema reports wrong shapes), like
``wheelfoundry.request.semantics``; ``parse`` takes a defaults-filled section that passed both.
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from wheelfoundry.catalog.catalog import ALL_PACKAGES, Catalog
from wheelfoundry.errors import Issue
from wheelfoundry.request.model import ImageWheel, RuntimeImage
from wheelfoundry.request.targets import check_arch_list, split_arch_list

PLACEHOLDERS = ("run", "torch", "variant", "python", "platform")
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
CUDA_BASE_MIN = Version("12.6")  # nvidia/cuda publishes ubuntu24.04 runtime images from 12.6 on
# Image jobs run on the stack's one runtime image project, an x86_64 CodeBuild project (template.yaml
# RuntimeImageProject, LINUX_CONTAINER); every stack has it (no condition), and nothing else builds
# images. An aarch64 image there would install aarch64 wheels into an x86_64 base and fail after the run.
IMAGE_PLATFORMS = ("x86_64",)
# A sample of every placeholder's widest value: a tag scheme valid with these is valid for any run.
SAMPLE = {"run": "x" * 40, "torch": "2.10.0.dev20260101", "variant": "cu130", "python": "3.13", "platform": "x86_64"}


def normalize_cc(value: Any) -> str | None:
    """``8.6`` (a JSON number), ``"8.0;8.6"``, ``"8.0 8.6"`` or ``["8.0", "8.6"]`` -> ``"8.0;8.6"``."""
    if value is None:
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return f"{float(value):.1f}" if float(value) == round(float(value), 1) else repr(value)
    if isinstance(value, str):
        return ";".join(split_arch_list(value))
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ";".join(value)
    return None


def _at_least(cuda: str, minimum: Version) -> bool:
    try:
        return Version(cuda) >= minimum
    except InvalidVersion:
        return True  # the target's own check reports it


def _items(value: Any) -> list[tuple[int, Any]]:
    return list(enumerate(value)) if isinstance(value, list) else []


@cache
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def run_variants(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(platform, "cpu" or CUDA version) of every build of a defaults-filled request."""
    if data.get("framework") == "extension":
        platforms = [p for p in data.get("platforms") or ["x86_64"] if isinstance(p, str)]
        cudas = [c for c in data.get("cuda") or ["cpu"] if isinstance(c, str)]
        return [(p, c) for p in platforms for c in cudas if c == "cpu" or p == "x86_64"]
    out = []
    for target in data.get("targets") or []:
        if isinstance(target, Mapping):
            cuda = target.get("cuda") if target.get("accelerator") == "cuda" else "cpu"
            out.append((str(target.get("platform", "x86_64")), str(cuda)))
    return out


def _check_cc(image: Mapping[str, Any], cudas: list[str], catalog: Catalog, skip: set[str]) -> list[Issue]:
    issues: list[Issue] = []
    spellings = {k: normalize_cc(image.get(k)) for k in ("gpu_cc", "arch_list") if f"image.{k}" not in skip}
    given = {k: v for k, v in spellings.items() if v is not None}
    if len(set(given.values())) > 1:
        issues.append(
            Issue("image.arch_list", f"{given['arch_list']!r} differs from gpu_cc {given['gpu_cc']!r}: give one")
        )
        return issues
    for key, value in given.items():
        where = f"image.{key}"
        if not cudas:
            issues.append(Issue(where, "a compute capability needs a CUDA variant in the image", value, ("cuda",)))
        for cuda in cudas:
            if cuda in catalog.cuda:
                issues += check_arch_list(where, value, catalog.cuda[cuda])
    return issues


def _check_tag(tag: Any, variants: list[tuple[str, str]], pythons: int, torches: int) -> list[Issue]:
    if not isinstance(tag, str):
        return []
    names = re.findall(r"\{([^{}]*)\}", tag)
    unknown = [n for n in names if n not in PLACEHOLDERS]
    if unknown:
        allowed = tuple(f"{{{p}}}" for p in PLACEHOLDERS)
        return [Issue("image.tag", f"unknown placeholder {{{unknown[0]}}}", tag, allowed)]
    rendered = tag.format(**SAMPLE)
    if not TAG.match(rendered):
        return [Issue("image.tag", f"{rendered!r} is not a valid image tag (at most 128 of A-Z a-z 0-9 _ . -)", tag)]
    needed = {
        "variant": len({c for _, c in variants}) > 1,
        "platform": len({p for p, _ in variants}) > 1,
        "python": pythons > 1,
        "torch": torches > 1,
    }
    missing = [n for n, need in needed.items() if need and n not in names]
    if missing:
        return [Issue("image.tag", f"images would share a tag: the scheme needs {{{missing[0]}}}", tag)]
    return []


def _run_packages(data: Mapping[str, Any]) -> set[str]:
    """Projects this run may build."""
    if data.get("framework") == "extension":
        return {canonicalize_name(str(data.get("name", "")))}
    packages = data.get("packages")
    if not isinstance(packages, list):
        return {canonicalize_name(n) for n in ALL_PACKAGES}  # the catalog's pairing
    names = {p if isinstance(p, str) else p.get("name") for p in packages if isinstance(p, str | Mapping)}
    return {canonicalize_name(n) for n in names if isinstance(n, str)}


def check(
    data: Mapping[str, Any], catalog: Catalog, skip: set[str], run_python: Iterable[str], torches: int = 1
) -> list[Issue]:
    """Problems of ``data["image"]`` against the run it belongs to."""
    image = data.get("image")
    if not isinstance(image, Mapping) or "image" in skip:
        return []
    issues: list[Issue] = []
    variants = run_variants(data)
    cudas_of_run = {c for _, c in variants}
    chosen = image.get("cuda")
    for i, cuda in _items(chosen):
        if isinstance(cuda, str) and f"image.cuda[{i}]" not in skip and cuda not in cudas_of_run:
            issues.append(Issue(f"image.cuda[{i}]", f"{cuda} is not a variant of this run", cuda, tuple(cudas_of_run)))
    if isinstance(chosen, list):
        variants = [v for v in variants if v[1] in chosen]
    foreign = sorted({p for p, _ in variants if p not in IMAGE_PLATFORMS})
    if foreign:
        message = (
            f"no image executor for {', '.join(foreign)}: this stack builds runtime images on x86_64 CodeBuild"
            " only (RuntimeImageProject); request images from a run of x86_64 targets"
        )
        issues.append(Issue("image", message, foreign, IMAGE_PLATFORMS))
    allowed = tuple(run_python)
    for i, py in _items(image.get("python")):
        if isinstance(py, str) and f"image.python[{i}]" not in skip and allowed and py not in allowed:
            issues.append(Issue(f"image.python[{i}]", f"Python {py} is not built by this run", py, allowed))
    pythons = len(image["python"]) if isinstance(image.get("python"), list) else len(allowed)
    cudas = sorted({c for _, c in variants if c != "cpu"})
    issues += _check_cc(image, cudas, catalog, skip)
    if image.get("base") == "cuda":
        for platform, cuda in variants:
            if cuda == "cpu" or not _at_least(cuda, CUDA_BASE_MIN):
                why = "a CPU variant" if cuda == "cpu" else f"CUDA {cuda} < {CUDA_BASE_MIN}"
                issues.append(Issue("image.base", f"no CUDA runtime base for {why} ({platform})", "cuda", ("slim",)))
    tz = image.get("tz")
    if isinstance(tz, str) and "image.tz" not in skip and _zones() and tz not in _zones():
        issues.append(Issue("image.tz", f"{tz!r} is not an IANA time zone", tz, ("UTC", "Europe/Berlin")))
    if "image.tag" not in skip:
        issues += _check_tag(image.get("tag"), variants, pythons, torches)
    built = _run_packages(data)
    seen: set[str] = set()
    for i, wheel in _items(image.get("wheels")):
        name = wheel if isinstance(wheel, str) else wheel.get("package") if isinstance(wheel, Mapping) else None
        if not isinstance(name, str) or f"image.wheels[{i}]" in skip:
            continue
        project = canonicalize_name(name)
        if project in seen:
            issues.append(Issue(f"image.wheels[{i}]", f"{name} is listed twice", name))
        seen.add(project)
        other_channel = isinstance(wheel, Mapping) and wheel.get("channel")
        if project not in built and not other_channel:
            message = f"{name} is not built by this run: name the channel it is published in"
            issues.append(Issue(f"image.wheels[{i}]", message, name, tuple(sorted(built))))
    for i, pin in _items(image.get("pip")):
        if isinstance(pin, str) and canonicalize_name(pin.split("==")[0]) in seen | built:
            issues.append(Issue(f"image.pip[{i}]", f"{pin} is one of the image's index wheels", pin))
    return issues


def parse(image: Mapping[str, Any] | None) -> RuntimeImage | None:
    if image is None:
        return None
    wheels = None
    if image.get("wheels"):
        wheels = tuple(
            ImageWheel(w) if isinstance(w, str) else ImageWheel(w["package"], w.get("version"), w.get("channel"))
            for w in image["wheels"]
        )
    cc = normalize_cc(image.get("gpu_cc")) or normalize_cc(image.get("arch_list"))
    return RuntimeImage(
        base=image["base"],
        python=tuple(image["python"]) if image.get("python") else None,
        cuda=tuple(image["cuda"]) if image.get("cuda") else None,
        wheels=wheels,
        pip=tuple(image["pip"]),
        uid=image["uid"],
        gid=image["gid"],
        user=image["user"],
        tz=image["tz"],
        gpu_cc=cc,
        arch_list=cc,
        tag=image["tag"],
    )
