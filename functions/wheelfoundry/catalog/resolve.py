"""Resolve a requested framework version against the catalog: exact versions, refs, pairings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from packaging.version import Version

from wheelfoundry.catalog.catalog import (
    DOMAIN_LIBRARIES,
    Catalog,
    MovingRef,
    Release,
    VersionKind,
    classify,
    minor_of,
    parse_rc,
)


class Unresolvable(ValueError):
    """A version the catalog cannot pair; carries what would have been allowed."""

    def __init__(self, message: str, allowed: tuple[str, ...] = ()):
        super().__init__(message)
        self.allowed = allowed


@dataclass(frozen=True)
class Resolved:
    spec: str
    kind: VersionKind
    torch_version: str | None  # exact release or RC; None for nightly/main/commit/ref
    release: Release | None
    moving: MovingRef | None
    rc: int | None
    python: tuple[str, ...]
    cuda: tuple[str, ...]
    paired: Mapping[str, str] = field(default_factory=dict)  # library -> exact version or moving ref
    cxx11_abi: bool = True
    aarch64_cuda: tuple[str, ...] = ()  # CUDA versions with linux-aarch64 builds (upstream's, per the catalog)

    @property
    def is_pinned(self) -> bool:
        """A commit or an arbitrary ref: domain libraries need explicit refs."""
        return self.kind in ("commit", "ref")

    def label(self) -> str:
        """Short form used in job ids: 2.5.1, 2.0.0rc2, nightly, main, a 12-hex commit, a ref slug."""
        if self.kind == "commit":
            return self.spec[:12]
        if self.kind == "ref":
            return "".join(c if c.isalnum() or c == "." else "-" for c in self.spec)[:40].strip("-")
        if self.kind == "rc" and self.torch_version:
            return str(Version(self.torch_version))
        return self.torch_version or self.spec


def _all_python(catalog: Catalog) -> tuple[str, ...]:
    versions = {p for r in catalog.releases for p in r.python} | {p for m in catalog.moving.values() for p in m.python}
    return tuple(sorted(versions, key=Version))


def _release_for(minor: str, catalog: Catalog) -> Release:
    release = catalog.release(minor)
    if release is None:
        known = tuple(r.torch for r in catalog.releases)
        raise Unresolvable(f"torch {minor} is not in the compatibility catalog", known)
    return release


def resolve_version(spec: str, catalog: Catalog) -> Resolved:
    kind = classify(spec)
    if kind in ("nightly", "main"):
        moving = catalog.moving[spec]
        paired = {lib: moving.ref for lib in moving.libraries}
        return Resolved(
            spec,
            spec,  # type: ignore[arg-type]
            None,
            None,
            moving,
            None,
            moving.python,
            moving.cuda,
            paired,
            moving.cxx11_abi,
            moving.aarch64_cuda,
        )
    if kind in ("commit", "ref"):
        every_cuda = tuple(sorted(catalog.cuda, key=Version))
        aarch64 = tuple(c for c in every_cuda if "aarch64" in catalog.cuda[c].platforms)
        return Resolved(spec, kind, None, None, None, None, _all_python(catalog), every_cuda, {}, True, aarch64)
    rc_parts = parse_rc(spec)
    if rc_parts is not None:
        base, number = rc_parts
        release = _release_for(minor_of(base) or base, catalog)
        if Version(base).micro != 0:
            raise Unresolvable(
                f"release candidates exist only for X.Y.0 releases, not {base}", (f"{release.torch}.0-rc1",)
            )
        version = f"{base}-rc{number}"
        paired = _pair(release, base, number)
        return Resolved(
            spec,
            "rc",
            version,
            release,
            None,
            number,
            release.python,
            release.all_cuda,
            paired,
            release.cxx11_abi,
            release.aarch64_cuda,
        )
    minor = minor_of(spec) or spec
    release = _release_for(minor, catalog)
    exact = release.latest_patch() if spec.count(".") == 1 else spec
    if Version(exact).micro not in release.patches:
        allowed = tuple(f"{release.torch}.{p}" for p in release.patches)
        raise Unresolvable(f"torch {exact} is not a known {release.torch} patch release", allowed)
    return Resolved(
        spec,
        "release",
        exact,
        release,
        None,
        None,
        release.python,
        release.all_cuda,
        _pair(release, exact, None),
        release.cxx11_abi,
        release.aarch64_cuda,
    )


def _pair(release: Release, torch_version: str, rc: int | None) -> dict[str, str]:
    paired = {}
    for lib in DOMAIN_LIBRARIES:
        version = release.library_version(lib, torch_version, rc)
        if version is not None:
            paired[lib] = version
    return paired


def python_for(resolved: Resolved, library: str) -> tuple[str, ...]:
    """Python versions a library of this release supports (narrower than torch's for some)."""
    if resolved.release is not None and library in resolved.release.python_limits:
        return resolved.release.python_limits[library]
    return resolved.python
