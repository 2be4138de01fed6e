"""Torch releases the catalog does not list yet, known from their published wheels (the watcher's record).

The catalog (data/catalog.toml) is the source of truth for framework builds and changes with a code change.
An extension build needs far fewer facts of a torch release: the Pythons and CUDA variants upstream
published it for, on which platforms; the toolkit and arch list come from the catalog's ``[cuda]`` entry of
that variant, the torch itself from PyTorch's index at build time. The watcher reads those facts from PyPI's
and PyTorch's indexes (wheelfoundry.catalog.upstream_index) and keeps them in the stack's bucket as
``watch/derived.json``; Validate adds them to the catalog for extension requests only, and never over a
release the catalog has. Only the stack's watcher writes that key, so a request cannot bring its own facts.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

from wheelfoundry.catalog.catalog import Catalog, Release, minor_of

DERIVED_KEY = "watch/derived.json"


@dataclasses.dataclass(frozen=True)
class DerivedRelease:
    """One torch minor release as its published wheels show it."""

    torch: str  # "2.15"
    versions: tuple[str, ...]  # the final patch releases published, oldest first: ("2.15.0",)
    python: tuple[str, ...]  # CPython versions with Linux wheels (free-threaded builds left out)
    cuda: tuple[str, ...]  # CUDA variants with x86_64 wheels (Validate plans those with a toolkit here)
    aarch64_cuda: tuple[str, ...]  # CUDA variants with aarch64 wheels, likewise
    sources: Mapping[str, str]  # fact -> the index URL it was read from

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "sources": dict(self.sources)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> DerivedRelease:
        return cls(
            torch=str(raw["torch"]),
            versions=tuple(str(v) for v in raw["versions"]),
            python=tuple(str(v) for v in raw["python"]),
            cuda=tuple(str(v) for v in raw["cuda"]),
            aarch64_cuda=tuple(str(v) for v in raw.get("aarch64_cuda", ())),
            sources={str(k): str(v) for k, v in (raw.get("sources") or {}).items()},
        )

    def release(self) -> Release:
        """As a catalog row: enough for an extension build, nothing for a framework build (no library pairs)."""
        cites = "; ".join(f"{k}: {v}" for k, v in sorted(self.sources.items()))
        return Release(
            torch=self.torch,
            patches=tuple(Version(v).micro for v in self.versions),
            python=self.python,
            cuda=self.cuda,
            cuda_experimental=(),
            libraries={},
            python_limits={},
            overrides={},
            cxx11_abi=True,  # every Linux wheel since 2.7 (catalog rows 2.7-2.14)
            source=f"derived from the published wheels ({cites})",
            aarch64_cuda=self.aarch64_cuda,
            sources={fact: f"derived: {url}" for fact, url in self.sources.items()},
        )


def with_derived(catalog: Catalog, derived: Iterable[DerivedRelease]) -> Catalog:
    """The catalog plus the derived releases it does not list (a catalog row always wins)."""
    extra = tuple(d.release() for d in derived if catalog.release(d.torch) is None and d.versions)
    if not extra:
        return catalog
    return dataclasses.replace(catalog, releases=(*catalog.releases, *extra))


def wanted(request: Any, catalog: Catalog) -> bool:
    """Whether ``request`` is an extension request naming a torch release the catalog lacks (only then are the
    derived facts read: any other request is judged, and an invalid one refused, without S3)."""
    if not isinstance(request, Mapping) or request.get("framework") != "extension":
        return False
    torches = request.get("torch")
    if not isinstance(torches, list):
        return False
    return any(isinstance(t, str) and (m := minor_of(t)) and catalog.release(m) is None for t in torches)


def parse(body: bytes) -> list[DerivedRelease]:
    """``watch/derived.json``'s releases; an entry that does not read as one is left out."""
    found = []
    for raw in json.loads(body).get("releases", []):
        try:
            release = DerivedRelease.from_json(raw)
            for version in release.versions:
                Version(version)
        except (KeyError, TypeError, ValueError, InvalidVersion):
            continue
        found.append(release)
    return found


def read(s3: Any, bucket: str) -> list[DerivedRelease]:
    """The watcher's record; none where it never wrote one (or it cannot be read: the catalog alone then)."""
    from botocore.exceptions import ClientError  # here: `wheelfoundry plan` imports this module, AWS-free

    try:
        return parse(s3.get_object(Bucket=bucket, Key=DERIVED_KEY)["Body"].read())
    except (ClientError, ValueError, AttributeError):
        return []


def body(releases: Iterable[DerivedRelease]) -> bytes:
    ordered = sorted(releases, key=lambda r: Version(r.torch))
    return json.dumps({"format": 1, "releases": [r.to_json() for r in ordered]}, indent=2).encode()
