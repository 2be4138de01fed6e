"""Resolve a CUDA toolkit lock from PyPI's answers: which nvidia-* wheel files, with which sha256.

NVIDIA publishes every CUDA toolkit on PyPI as the ``cuda-toolkit`` metapackage, whose extras name the
component wheels (``cuda-toolkit[nvcc,crt,...]==13.2.2`` -> ``nvidia-cuda-nvcc==13.2.86.*``, ...). A lock is
the compiler (those extras, for CUDA 13 and later; CUDA 11/12 take theirs from NVIDIA's redist archives)
plus each requirement line a slim torch wheel pins, every line resolved to one file per platform with the
sha256 the index publishes (PEP 691 JSON).

Everything here works on the index's answers through :class:`SimpleIndex`, whose ``get`` is the only I/O:
tools/lock_cuda.py passes an HTTPS fetch, the tests a recorded folder, and the watcher may pass its own.
Nothing here reads the catalog: the caller says which CUDA, which release and which lines.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from wheelfoundry.catalog.wheel_metadata import metadata_requirements

SIMPLE = "https://pypi.org/simple/{}/"
SIMPLE_JSON = {"Accept": "application/vnd.pypi.simple.v1+json"}
METAPACKAGE = "cuda-toolkit"
# The compiler and core of a CUDA 13+ toolkit: the extras of NVIDIA's metapackage that nvcc needs to compile
# and link a torch extension (crt and nvvm are nvcc's own; cudart, cccl: headers every .cu includes).
COMPILER_EXTRAS = ("nvcc", "nvvm", "crt", "cccl", "cudart", "culibos", "profiler", "nvml", "cupti", "nvtx", "nvrtc")
# The libraries a CUDA 13 torch wheel pins through the metapackage (torch 2.12's line): locked when the
# caller names no line, so that an extension's headers and link libraries are there even without a catalog row.
LIBRARY_EXTRAS = (
    "cublas", "cudart", "cufft", "cufile", "cupti", "curand", "cusolver", "cusparse", "nvjitlink", "nvrtc", "nvtx",
)  # fmt: skip
PLATFORMS = ("x86_64", "aarch64")
MAX_GLIBC = (2, 28)  # the builder base is manylinux_2_28: a wheel needing a newer glibc cannot run there
_CUDA = re.compile(r"^\d+\.\d+$")

Get = Callable[[str, Mapping[str, str]], bytes]


class ToolkitLockError(ValueError):
    """What was asked cannot be locked from the index (names the value and what is available)."""


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    file: str
    sha256: str
    url: str
    part: str = "library"  # "compiler": always installed; "library": installed when a requirement names it

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Resolution:
    cuda: str
    platform: str
    release: str
    wheels: tuple[Wheel, ...]
    requirements: Mapping[str, tuple[str, ...]]  # requirement line -> the pins it stands for
    unavailable: Mapping[str, str] = field(default_factory=dict)  # requirement line -> why not on this platform


class SimpleIndex:
    """A package index's simple API (JSON form) read through ``get``; each project asked once."""

    def __init__(self, get: Get, base: str = SIMPLE) -> None:
        self.get = get
        self.base = base
        self._files: dict[str, list[dict[str, Any]]] = {}

    def files(self, name: str) -> list[dict[str, Any]]:
        key = canonicalize_name(name)
        if key not in self._files:
            self._files[key] = list(json.loads(self.get(self.base.format(key), SIMPLE_JSON)).get("files", []))
        return self._files[key]

    def metadata(self, file: Mapping[str, Any]) -> str:
        """The file's METADATA: its PEP 658 copy where the index has one, else read from the wheel (byte-checked)."""
        if file.get("core-metadata") or file.get("data-dist-info-metadata"):
            return self.get(file["url"] + ".metadata", {}).decode()
        body = self.get(file["url"], {})
        if hashlib.sha256(body).hexdigest() != file["hashes"]["sha256"]:
            raise ToolkitLockError(f"{file['filename']}: not the bytes the index lists (sha256 differs)")
        with zipfile.ZipFile(io.BytesIO(body)) as wheel:
            name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
            return wheel.read(name).decode()


def _wheel_version(filename: str) -> Version | None:
    try:
        return parse_wheel_filename(filename)[1]
    except (InvalidWheelFilename, InvalidVersion):
        return None


def releases(files: Iterable[Mapping[str, Any]]) -> list[Version]:
    """The final releases among a project's wheel files (yanked ones and pre-releases left out), oldest first."""
    found = {v for f in files if not f.get("yanked") and (v := _wheel_version(f["filename"])) and not v.is_prerelease}
    return sorted(found)


def cuda_versions(files: Iterable[Mapping[str, Any]]) -> list[str]:
    """The CUDA X.Y versions the ``cuda-toolkit`` metapackage has a final release for."""
    return sorted({f"{v.major}.{v.minor}" for v in releases(files)}, key=Version)


def pick_release(cuda: str, files: Sequence[Mapping[str, Any]], pinned: Iterable[str] = ()) -> str:
    """The ``cuda-toolkit`` release to lock for CUDA ``cuda``: the newest one the requirement lines pin
    (``pinned``: the lines' ``cuda-toolkit==X.Y.Z``), else the newest final X.Y.* release on the index."""
    if not _CUDA.match(cuda):
        raise ToolkitLockError(f"cuda: {cuda!r} is not a CUDA version; expected MAJOR.MINOR, e.g. 13.2")
    have = releases(files)
    mine = [v for v in have if f"{v.major}.{v.minor}" == cuda]
    if not mine:
        offered = ", ".join(cuda_versions(files)) or "none"
        raise ToolkitLockError(f"cuda: {cuda} has no {METAPACKAGE} release on PyPI; it has CUDA {offered}")
    wanted = [Version(p) for p in pinned if f"{Version(p).major}.{Version(p).minor}" == cuda]
    if wanted:
        missing = sorted(str(v) for v in wanted if v not in mine)
        if missing:
            raise ToolkitLockError(
                f"{METAPACKAGE}=={missing[0]}: not on PyPI; CUDA {cuda} has {', '.join(str(v) for v in mine)}"
            )
        return str(max(wanted))
    return str(max(mine))


def metapackage_pins(lines: Iterable[str]) -> list[str]:
    """The exact ``cuda-toolkit==V`` versions among requirement lines (a torch wheel's pins)."""
    found = []
    for line in lines:
        req = _requirement(line)
        if canonicalize_name(req.name) == METAPACKAGE:
            found += [s.version for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version]
    return found


def _glibc(platform_tag: str, arch: str) -> tuple[int, int] | None:
    legacy = {f"manylinux1_{arch}": (2, 5), f"manylinux2010_{arch}": (2, 12), f"manylinux2014_{arch}": (2, 17)}
    if platform_tag in legacy:
        return legacy[platform_tag]
    match = re.fullmatch(rf"manylinux_(\d+)_(\d+)_{arch}", platform_tag)
    return (int(match[1]), int(match[2])) if match else None


def pick_file(files: Iterable[Mapping[str, Any]], name: str, spec: str, arch: str) -> Wheel | None:
    """The newest version matching ``spec`` with a manylinux (glibc <= 2.28) wheel for ``arch``."""
    requirement = Requirement(f"{name}{spec}")
    best: tuple[Version, tuple[int, int], Mapping[str, Any]] | None = None
    for file in files:
        if not file["filename"].endswith(".whl") or file.get("yanked"):
            continue
        _, version, _, tags = parse_wheel_filename(file["filename"])
        if not requirement.specifier.contains(version, prereleases=True):
            continue
        glibcs = [g for t in tags if (g := _glibc(t.platform, arch)) and g <= MAX_GLIBC]
        if glibcs and (best is None or (version, max(glibcs)) > best[:2]):
            best = (version, max(glibcs), file)
    if best is None:
        return None
    file = best[2]
    return Wheel(str(canonicalize_name(name)), str(best[0]), file["filename"], file["hashes"]["sha256"], file["url"])


def _requirement(line: str) -> Requirement:
    try:
        return Requirement(line.split(";", 1)[0])
    except InvalidRequirement as exc:
        raise ToolkitLockError(f"requirement: {line!r} is not a PEP 508 requirement ({exc})") from exc


def _marker_env(extra: str, arch: str) -> dict[str, str]:
    # The lock is for Linux on ``arch`` whatever machine writes it (13.2's markers name platform_machine).
    return {"extra": extra, "sys_platform": "linux", "platform_system": "Linux", "platform_machine": arch}


def metapackage_requirements(metadata: str, extras: Iterable[str], arch: str) -> list[Requirement]:
    """The Requires-Dist of a ``cuda-toolkit`` METADATA that the given extras select on Linux ``arch``."""
    head = metadata.split("\n\n", 1)[0]
    found = []
    for key, _, value in (line.partition(": ") for line in head.splitlines()):
        if key != "Requires-Dist":
            continue
        dep = Requirement(value)
        if dep.marker and any(dep.marker.evaluate(_marker_env(e, arch)) for e in extras):
            found.append(dep)
    return found


def _metapackage_file(index: SimpleIndex, spec: str) -> Mapping[str, Any]:
    wanted = Requirement(f"{METAPACKAGE}{spec}").specifier
    candidates = [
        (v, f) for f in index.files(METAPACKAGE)
        if f["filename"].endswith(".whl") and not f.get("yanked")
        and (v := _wheel_version(f["filename"])) and wanted.contains(v, prereleases=True)
    ]  # fmt: skip
    if not candidates:
        offered = ", ".join(str(v) for v in releases(index.files(METAPACKAGE))) or "none"
        raise ToolkitLockError(f"{METAPACKAGE}{spec}: no such release on PyPI; it has {offered}")
    return max(candidates, key=lambda c: c[0])[1]


def expand(index: SimpleIndex, line: str, arch: str) -> tuple[list[Wheel], str | None]:
    """The wheels one requirement line stands for on ``arch``, or why it cannot be locked there."""
    req = _requirement(line)
    if canonicalize_name(req.name) != METAPACKAGE:
        wheel = pick_file(index.files(req.name), req.name, str(req.specifier), arch)
        return ([wheel], None) if wheel else ([], f"{line}: no manylinux {arch} wheel on PyPI")
    meta = index.metadata(_metapackage_file(index, str(req.specifier)))
    wheels = []
    for dep in metapackage_requirements(meta, sorted(req.extras), arch):
        wheel = pick_file(index.files(dep.name), dep.name, str(dep.specifier), arch)
        if wheel is None:
            return [], f"{line}: {dep.name}{dep.specifier} has no manylinux {arch} wheel on PyPI"
        wheels.append(wheel)
    if not wheels:
        return [], f"{line}: its extras select no wheel for Linux {arch}"
    return wheels, None


def is_toolkit_line(line: str) -> bool:
    name = canonicalize_name(_requirement(line).name)
    return name.startswith("nvidia-") or name == METAPACKAGE


def default_lines(release: str) -> list[str]:
    """What a lock holds where the caller names no line: the libraries through NVIDIA's metapackage."""
    return [f"{METAPACKAGE}[{','.join(LIBRARY_EXTRAS)}]=={release}"]


def resolve(
    index: SimpleIndex, cuda: str, platform: str, lines: Iterable[str] = (), release: str | None = None
) -> Resolution:
    """Lock CUDA ``cuda`` for ``platform``: its compiler (13+) and each requirement line.

    ``release``: NVIDIA's toolkit release the compiler comes from (the catalog's ``toolkit``); None: the one
    the lines pin, else the newest on PyPI. A line with no wheel for ``platform`` is recorded as unavailable;
    a missing compiler is an error.
    """
    if platform not in PLATFORMS:
        raise ToolkitLockError(f"platform: {platform!r} is not one of {', '.join(PLATFORMS)}")
    # Only toolkit parts are locked: a torch wheel's triton or cuda-bindings pin is not NVIDIA's toolkit.
    lines = sorted({line.split(";", 1)[0].strip() for line in lines if line.strip() and is_toolkit_line(line)})
    release = release or pick_release(cuda, index.files(METAPACKAGE), metapackage_pins(lines))
    if f"{Version(release).major}.{Version(release).minor}" != cuda:
        raise ToolkitLockError(f"release: {release} is not a CUDA {cuda} release (expected {cuda}.x)")
    wheels: dict[str, Wheel] = {}
    if Version(release).major >= 13:
        compiler, why = expand(index, f"{METAPACKAGE}[{','.join(COMPILER_EXTRAS)}]=={release}", platform)
        if why:
            raise ToolkitLockError(f"CUDA {cuda} compiler for {platform}: {why}")
        wheels |= {w.pin: replace(w, part="compiler") for w in compiler}
    table: dict[str, tuple[str, ...]] = {}
    unavailable: dict[str, str] = {}
    for line in lines or default_lines(release):
        found, why = expand(index, line, platform)
        if why:
            unavailable[line] = why
            continue
        table[line] = tuple(sorted({w.pin for w in found}))
        for wheel in found:
            wheels.setdefault(wheel.pin, wheel)
    return Resolution(cuda, platform, release, tuple(sorted(wheels.values(), key=lambda w: w.pin)), table, unavailable)


def torch_lines(metadata: str, cuda: str) -> list[str]:
    """The toolkit requirement lines of a torch wheel's METADATA, if that wheel was built with CUDA ``cuda``
    (its ``cuda-toolkit==X.Y.Z`` pin, or its ``nvidia-cuda-runtime*`` pin, says which); else none."""
    head = metadata.split("\n\n", 1)[0]  # the headers: never a description's text
    lines = [line.split(";", 1)[0].strip() for line in metadata_requirements(head) if is_toolkit_line(line)]
    built = {f"{Version(p).major}.{Version(p).minor}" for p in metapackage_pins(lines)}
    for line in lines:
        req = _requirement(line)
        if canonicalize_name(req.name).startswith("nvidia-cuda-runtime"):
            built |= {".".join(s.version.split(".")[:2]) for s in req.specifier if s.operator in ("==", "~=")}
    return lines if cuda in built else []
