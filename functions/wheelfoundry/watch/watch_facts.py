"""What the watcher knows of a torch release and of a subscribed package, before it compares with a channel.

- A torch release's extension-build facts: the catalog's row where it has one (what Validate accepts), else
  facts derived from the published wheels (wheelfoundry.catalog.upstream_index ->
  wheelfoundry.catalog.derived): its Pythons,
  and its variants per platform (cpu, each CUDA version) from PyTorch's index and PyPI's METADATA.
- Whether this deployment can build a CUDA variant: the catalog's toolkit entry (or the stack's) and the
  toolkit lock the deployed bundle recorded (bundles/current.json ``pins.cuda``, wfbuild.images.pins) or the watcher
  wrote (wheelfoundry.toolkits.stack_toolkits); a missing one is named.
- The subscribed package's source: a PyPI sdist (pinned, or the newest final release), a git ref, an sdist.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename
from packaging.version import InvalidVersion, Version

from wheelfoundry.catalog.catalog import Catalog
from wheelfoundry.catalog.derived import DerivedRelease
from wheelfoundry.catalog.upstream_index import IndexFile, TorchRelease, cuda_of
from wheelfoundry.planning.extensions import source_version
from wheelfoundry.request.model import ExtensionSource
from wheelfoundry.watch.subscriptions import Subscription

NO_TOOLKIT = (
    'CUDA {cuda}: no toolkit entry in the catalog ([cuda."{cuda}"] in functions/wheelfoundry/data/catalog.toml)'
)
OLD = "older than the catalog's newest release and not in it: not followed (add its row to the catalog)"
LOCK_HINT = "run tools/lock_cuda.py wheels {cuda} --platform {platform} (CUDA 11/12: also redist), then redeploy"


@dataclass(frozen=True)
class PackageRelease:
    """One sdist of a subscribed package on PyPI."""

    version: str
    filename: str
    url: str
    sha256: str | None


def package_releases(files: Iterable[IndexFile]) -> tuple[PackageRelease, ...]:
    found = []
    for f in files:
        if f.yanked:
            continue
        try:
            _, version = parse_sdist_filename(f.filename)
        except (InvalidSdistFilename, InvalidVersion):
            continue
        found.append(PackageRelease(str(version), f.filename, f.url, f.sha256))
    return tuple(sorted(found, key=lambda r: Version(r.version)))


@dataclass(frozen=True)
class ReleaseFacts:
    minor: str
    spec: str  # what the request names: an exact release the catalog (or the derived row) knows
    version: str
    python: tuple[str, ...]
    variants: Mapping[str, tuple[str, ...]]  # platform -> variants: cpu, 13.0 ...
    derived: DerivedRelease | None = None
    problems: tuple[str, ...] = field(default_factory=tuple)


def release_facts(
    release: TorchRelease, wanted: SpecifierSet, catalog: Catalog, pytorch_read: bool
) -> ReleaseFacts | None:
    """The facts of ``release`` for a subscription's range; None when no patch of it is in the range."""
    in_range = [v for v in release.versions if wanted.contains(v)]
    if not in_range:
        return None
    chosen = max(in_range, key=Version)
    row = catalog.release(release.minor)
    if row is not None:
        known = [f"{row.torch}.{p}" for p in row.patches if wanted.contains(f"{row.torch}.{p}")]
        if not known:
            return None
        spec = chosen if Version(chosen).micro in row.patches else max(known, key=Version)
        variants = {"x86_64": ("cpu", *row.all_cuda), "aarch64": ("cpu", *row.aarch64_cuda)}
        return ReleaseFacts(row.torch, spec, spec, row.python, variants)
    if Version(release.minor) < Version(catalog.newest_release().torch):  # between or before the catalog's rows
        return ReleaseFacts(release.minor, chosen, chosen, (), {}, problems=(f"torch {chosen}: {OLD}",))
    return _derived_facts(release, chosen, pytorch_read)


def _derived_facts(release: TorchRelease, chosen: str, pytorch_read: bool) -> ReleaseFacts:
    problems: list[str] = []
    per_platform: dict[str, list[str]] = {"x86_64": [], "aarch64": []}
    for label, platforms in release.variants.items():
        for platform in platforms:
            if platform in per_platform and (label == "cpu" or cuda_of(label)):
                per_platform[platform].append("cpu" if label == "cpu" else str(cuda_of(label)))
    if release.pypi_cuda and "x86_64" in release.platforms and release.pypi_cuda not in per_platform["x86_64"]:
        per_platform["x86_64"].append(release.pypi_cuda)  # PyPI's Linux wheel is one CUDA build
    if not pytorch_read:
        seen = f"CUDA {release.pypi_cuda}" if release.pypi_cuda else "none"
        problems.append(
            f"torch {chosen}: PyTorch's index was not read, so of its variants only PyPI's is known ({seen})"
        )
    # Every CUDA variant upstream published is a fact of the release, with or without a toolkit here: the
    # watcher may lock it (wheelfoundry.toolkits.stack_toolkits), and lock_problem names each cell it cannot build.
    order = {
        p: tuple(sorted(set(v), key=lambda c: (c != "cpu", Version(c) if c != "cpu" else Version("0"))))
        for p, v in per_platform.items()
    }
    derived = DerivedRelease(
        torch=release.minor,
        versions=release.versions,
        python=release.python,
        cuda=tuple(c for c in order["x86_64"] if c != "cpu"),
        aarch64_cuda=tuple(c for c in order["aarch64"] if c != "cpu"),
        sources=dict(release.sources),
    )
    return ReleaseFacts(release.minor, chosen, chosen, release.python, order, derived, tuple(problems))


def lock_problem(
    cuda: str,
    platform: str,
    catalog: Catalog,
    locks: Mapping[str, bool] | None,
    notes: Mapping[str, str] | None = None,
) -> str | None:
    """Why this deployment cannot build CUDA ``cuda`` on ``platform``, then ``; `` and the fix (None: it can, or
    the deployed bundle does not say: Validate decides). ``notes``: "<X.Y>-<platform>" -> what the watcher
    knows better (a lock awaiting approval, one it could not write)."""
    if notes and (note := notes.get(f"{cuda}-{platform}")):
        return note
    if cuda not in catalog.cuda and Version(cuda).major >= 13:  # its compiler is on PyPI: the watcher locks it
        why = f"CUDA {cuda}: no toolkit for {platform} in this deployment (no catalog row, no lock of the stack's)"
        return f"{why}; the stack's watcher locks CUDA 13+ itself on its tick (wheelfoundry toolkits list)"
    if cuda not in catalog.cuda:
        return NO_TOOLKIT.format(cuda=cuda) + "; add it (archs, default arch list), a lock, then redeploy"
    if locks is None:
        return None
    hint = LOCK_HINT.format(cuda=cuda, platform=platform)
    compiler = locks.get(f"{cuda}-{platform}")
    if compiler is None:
        return f"CUDA {cuda}: no lock for {platform}; {hint}"
    if not compiler:
        return f"CUDA {cuda}: the {platform} lock has no compiler (nvcc) yet; {hint}"
    return None


def locks_of(pins: Mapping[str, Any] | None) -> dict[str, bool] | None:
    """``pins.cuda`` of bundles/current.json (wfbuild.images.pins.cuda_locks) as "13.0-x86_64" -> has a compiler."""
    locks = (pins or {}).get("cuda")
    if not isinstance(locks, Mapping):
        return None
    return {str(k): bool(v.get("compiler", True)) if isinstance(v, Mapping) else True for k, v in locks.items()}


def resolve_source(
    sub: Subscription, packages: Mapping[str, tuple[PackageRelease, ...]], bucket: str
) -> tuple[dict[str, str], str | None, PackageRelease | None] | str:
    """(the request's source, the package version its wheels get (None: unknown), a PyPI sdist to copy into the
    bucket first), or why there is nothing to build."""
    source = sub.source
    if "pypi" in source:
        project = canonicalize_name(sub.package)
        releases = packages.get(project)
        if releases is None:
            return f"{sub.package}: its PyPI page was not read"
        final = [r for r in releases if not Version(r.version).is_prerelease]
        if source["pypi"] == "latest":
            if not final:
                return f"{sub.package}: no final release with an sdist on PyPI"
            chosen = final[-1]
        else:
            matches = [r for r in releases if Version(r.version) == Version(source["pypi"])]
            if not matches:
                shown = ", ".join(r.version for r in final[-5:]) or "none"
                return f"{sub.package} {source['pypi']}: no such sdist on PyPI (newest: {shown})"
            chosen = matches[-1]
        key = f"sources/pypi/{project}/{chosen.filename}"
        return {"s3": f"s3://{bucket}/{key}"}, chosen.version, chosen
    if "git" in source:
        version = source_version(ExtensionSource(None, source["git"], source.get("ref"), source.get("subdirectory")))
        return dict(source), None if version == "from source" else version, None
    version = source_version(ExtensionSource(source["s3"], None, None, None))
    return dict(source), None if version == "from source" else version, None
