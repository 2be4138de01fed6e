"""The compatibility catalog: what can be built, read from ``data/catalog.toml``.

The TOML file is the single source of truth; this module only types it and answers
questions about it. Nothing here guesses: a pairing the file does not state is rejected.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

DOMAIN_LIBRARIES = ("torchvision", "torchaudio", "torchtext", "torchdata")
ALL_PACKAGES = ("torch", *DOMAIN_LIBRARIES)

VersionKind = Literal["release", "rc", "nightly", "main", "commit", "ref"]

_RC = re.compile(r"^(?P<base>\d+\.\d+\.\d+)-?rc(?P<n>[1-9])$")
_RELEASE = re.compile(r"^\d+\.\d+(\.\d+)?$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class Library:
    name: str
    repo: str
    tag: str  # format string with {version}
    note: str = ""
    last: str | None = None  # last release, for libraries whose development ended
    native: bool = True  # False: its wheels are built pure Python here (never sent through auditwheel)
    env: Mapping[str, str] = field(default_factory=dict)  # build switches set for every build of it
    sources: Mapping[str, str] = field(default_factory=dict)

    def tag_for(self, version: str) -> str:
        return self.tag.format(version=version)


@dataclass(frozen=True)
class CudaToolkit:
    version: str
    archs: tuple[str, ...]  # compute capabilities this toolkit can target
    default_arch_list: str
    requirements: tuple[str, ...]  # pinned nvidia-* wheels a slim torch wheel depends on
    toolkit: str = ""  # NVIDIA's toolkit release the compiler comes from (its lock: buildspecs/images/scripts/cuda/)
    gcc_max: int = 0  # the newest host GCC major this nvcc accepts (the builder image's gcc-toolset)
    platforms: tuple[str, ...] = ("x86_64",)  # where its lock assembles a toolkit (aarch64: NVIDIA's linux-sbsa)
    env: Mapping[str, str] = field(default_factory=dict)  # build_cuda.sh exports for this toolkit


@dataclass(frozen=True)
class CudaBuild:
    """What one release's upstream build did differently for one toolkit (None: the toolkit's)."""

    arch_list: str | None = None
    requirements: tuple[str, ...] | None = None
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Release:
    """One torch minor release line and what pairs with it."""

    torch: str  # "2.5"
    patches: tuple[int, ...]
    python: tuple[str, ...]
    cuda: tuple[str, ...]
    cuda_experimental: tuple[str, ...]
    libraries: Mapping[str, str]  # library -> minor version paired with torch X.Y
    python_limits: Mapping[str, tuple[str, ...]]  # library -> narrower Python list
    overrides: Mapping[str, Mapping[str, str]]  # "2.0.0" -> library -> exact version
    cxx11_abi: bool
    source: str
    manylinux: str = "2_28"  # upstream's x86_64 baseline: "2_17" (manylinux2014) or "2_28"
    cuda_build: Mapping[str, CudaBuild] = field(default_factory=dict)
    # CUDA versions upstream built linux-aarch64 (sbsa) wheels for, and how where they differ from x86_64
    aarch64_cuda: tuple[str, ...] = ()
    cuda_build_aarch64: Mapping[str, CudaBuild] = field(default_factory=dict)
    aarch64: Mapping[str, str] = field(default_factory=dict)  # upstream "openblas" / "acl" tags
    aarch64_mkldnn: bool = True  # upstream's aarch64 CPU wheels had oneDNN (+ ACL): a request's default
    # exact torch version -> the triton requirement of its CUDA wheels (it moves with patches: 2.3.0/2.3.1)
    triton: Mapping[str, str] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)  # fact -> "<ref>:<path>" or "unverified: ..."

    @property
    def all_cuda(self) -> tuple[str, ...]:
        return self.cuda + self.cuda_experimental

    def latest_patch(self) -> str:
        return f"{self.torch}.{max(self.patches)}"

    def library_version(self, library: str, torch_version: str, rc: int | None = None) -> str | None:
        """Exact version of ``library`` that pairs with ``torch_version`` (None: not paired)."""
        minor = self.libraries.get(library)
        if minor is None:
            return None
        # Overrides describe final patch releases; an RC always pairs by the RC rule.
        exact = None if rc is not None else self.overrides.get(torch_version, {}).get(library)
        if exact is not None:
            return exact
        if minor.startswith("="):  # one exact release serves every torch patch (and its RCs)
            return minor[1:]
        patch = Version(torch_version).micro
        base = f"{minor}.{patch}"
        return f"{base}-rc{rc}" if rc is not None else base


@dataclass(frozen=True)
class MovingRef:
    """``nightly`` or ``main``: a branch of every library, not a fixed version."""

    name: str
    ref: str
    python: tuple[str, ...]
    cuda: tuple[str, ...]
    libraries: tuple[str, ...]
    cxx11_abi: bool
    aarch64_cuda: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Catalog:
    libraries: Mapping[str, Library]
    releases: tuple[Release, ...]
    moving: Mapping[str, MovingRef]
    cuda: Mapping[str, CudaToolkit]
    sources: tuple[str, ...]
    refs: Mapping[str, str] = field(default_factory=dict)
    build_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    explained: Mapping[str, str] = field(default_factory=dict)

    def release(self, minor: str) -> Release | None:
        return next((r for r in self.releases if r.torch == minor), None)

    def newest_release(self) -> Release:
        return max(self.releases, key=lambda r: Version(r.torch))

    def known_versions(self) -> tuple[str, ...]:
        """Every exact torch version the catalog can pair, oldest first."""
        return tuple(f"{r.torch}.{p}" for r in self.releases for p in r.patches)

    def toolkit_for(self, release: Release | None, cuda: str, platform: str = "x86_64") -> CudaToolkit:
        """The toolkit as ``release``'s upstream build for ``platform`` used it (arch list, pins, env)."""
        toolkit = self.cuda[cuda]
        build = release.cuda_build.get(cuda) if release else None
        if release and platform == "aarch64" and cuda in release.cuda_build_aarch64:
            aarch64 = release.cuda_build_aarch64[cuda]  # on top of the x86_64 build of the release
            build = CudaBuild(
                aarch64.arch_list or (build.arch_list if build else None),
                aarch64.requirements if aarch64.requirements is not None else (build.requirements if build else None),
                {**(build.env if build else {}), **aarch64.env},
            )
        if build is None:
            return toolkit
        return dataclasses.replace(
            toolkit,
            default_arch_list=build.arch_list or toolkit.default_arch_list,
            requirements=toolkit.requirements if build.requirements is None else build.requirements,
            env={**toolkit.env, **build.env},
        )

    def cuda_requirements(
        self, release: Release | None, cuda: str, version: str | None, platform: str = "x86_64"
    ) -> tuple[str, ...]:
        """Requires-Dist of a slim CUDA torch wheel: the toolkit's pins as ``release`` used them, plus the
        triton that upstream's CUDA wheels of that exact ``version`` require (an RC: its final's)."""
        pins = self.toolkit_for(release, cuda, platform).requirements
        triton = release.triton.get(Version(version).base_version) if release and version and pins else None
        return (*pins, triton) if triton else pins

    def cuda_env(self, release: Release | None, cuda: str, platform: str = "x86_64") -> dict[str, str]:
        """Upstream's build_cuda.sh variables for a slim wheel of ``cuda``."""
        return {**self.build_env.get("cuda", {}), **self.toolkit_for(release, cuda, platform).env}

    def torch_build_env(self, release: Release | None, platform: str, cuda: str | None) -> dict[str, str]:
        """Upstream's build-script variables for a torch wheel of this platform / CUDA."""
        if cuda:
            return self.cuda_env(release, cuda, platform)
        return dict(self.build_env.get("cpu" if platform == "x86_64" else platform, {}))

    def aarch64_build_args(self, release: Release | None) -> dict[str, str]:
        """Builder-image arguments pinning OpenBLAS / ACL to what the release was built with."""
        names = {"openblas": "OPENBLAS_VERSION", "acl": "ACL_VERSION"}
        return {names[k]: v for k, v in (release.aarch64 if release else {}).items() if k in names}

    def explanation(self, minor: str, fact: str) -> str | None:
        """Why ``fact`` deliberately differs from upstream for torch ``minor`` (None: unexplained)."""
        for pattern, reason in self.explained.items():
            releases, _, facts = pattern.partition(":")
            if fnmatch.fnmatchcase(minor, releases) and fnmatch.fnmatchcase(fact, facts):
                return reason
        return None


def classify(spec: str) -> VersionKind | None:
    """What kind of framework version a request string is (None: not a version at all)."""
    if spec in ("nightly", "main"):
        return spec  # type: ignore[return-value]
    if _COMMIT.match(spec):
        return "commit"
    if _RC.match(spec):
        return "rc"
    if _RELEASE.match(spec):
        return "release"
    return "ref"


def parse_rc(spec: str) -> tuple[str, int] | None:
    match = _RC.match(spec)
    return (match["base"], int(match["n"])) if match else None


def minor_of(version: str) -> str | None:
    try:
        parsed = Version(version)
    except InvalidVersion:
        return None
    return f"{parsed.major}.{parsed.minor}"


def _tuple(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value or ())


def _load(data: Mapping[str, Any]) -> Catalog:
    libraries = {
        name: Library(
            name=name,
            repo=lib["repo"],
            tag=lib["tag"],
            note=lib.get("note", ""),
            last=lib.get("last"),
            native=bool(lib.get("native", True)),
            env=dict(lib.get("env", {})),
            sources=dict(lib.get("sources", {})),
        )
        for name, lib in data["libraries"].items()
    }
    releases = tuple(
        Release(
            torch=rel["torch"],
            patches=tuple(int(p) for p in rel["patches"]),
            python=_tuple(rel["python"]),
            cuda=_tuple(rel.get("cuda")),
            cuda_experimental=_tuple(rel.get("cuda_experimental")),
            libraries=dict(rel.get("libraries", {})),
            python_limits={k: _tuple(v) for k, v in rel.get("python_limits", {}).items()},
            overrides={k: dict(v) for k, v in rel.get("overrides", {}).items()},
            cxx11_abi=bool(rel.get("cxx11_abi", False)),
            source=rel.get("source", ""),
            manylinux=rel.get("manylinux", "2_28"),
            cuda_build={k: _cuda_build(v) for k, v in rel.get("cuda_build", {}).items()},
            aarch64_cuda=_tuple(rel.get("aarch64_cuda")),
            cuda_build_aarch64={k: _cuda_build(v) for k, v in rel.get("cuda_build_aarch64", {}).items()},
            aarch64=dict(rel.get("aarch64", {})),
            aarch64_mkldnn=bool(rel.get("aarch64_mkldnn", True)),
            triton=dict(rel.get("triton", {})),
            sources=dict(rel.get("sources", {})),
        )
        for rel in data["release"]
    )
    moving = {
        name: MovingRef(
            name=name,
            ref=ref["ref"],
            python=_tuple(ref["python"]),
            cuda=_tuple(ref["cuda"]),
            libraries=_tuple(ref["libraries"]),
            cxx11_abi=bool(ref.get("cxx11_abi", True)),
            aarch64_cuda=_tuple(ref.get("aarch64_cuda")),
            sources=dict(ref.get("sources", {})),
        )
        for name, ref in data["moving"].items()
    }
    cuda = {
        version: CudaToolkit(
            version=version,
            archs=_tuple(tk["archs"]),
            default_arch_list=tk["default_arch_list"],
            requirements=_tuple(tk.get("requirements")),
            toolkit=tk.get("toolkit", ""),
            gcc_max=int(tk.get("gcc_max", 0)),
            platforms=_tuple(tk.get("platforms", ["x86_64"])),
            env=dict(tk.get("env", {})),
        )
        for version, tk in data["cuda"].items()
    }
    return Catalog(
        libraries=libraries,
        releases=releases,
        moving=moving,
        cuda=cuda,
        sources=_tuple(data.get("sources")),
        refs=dict(data.get("refs", {})),
        build_env={k: dict(v) for k, v in data.get("build_env", {}).items()},
        explained=dict(data.get("explained", {})),
    )


def _cuda_build(raw: Mapping[str, Any]) -> CudaBuild:
    reqs = raw.get("requirements")
    return CudaBuild(raw.get("arch_list"), None if reqs is None else _tuple(reqs), dict(raw.get("env", {})))


@cache
def load_catalog() -> Catalog:
    text = resources.files("wheelfoundry").joinpath("data/catalog.toml").read_text(encoding="utf-8")
    return _load(tomllib.loads(text))


def catalog_from_text(text: str) -> Catalog:
    """For tests and for operators checking an edited catalog before deploying it."""
    return _load(tomllib.loads(text))
