"""Torch releases as PyPI and PyTorch's own index publish them: what the watcher follows. Pure: the bytes of
the index pages come in, facts go out (wheelfoundry.aws.watch fetches them).

- PyPI's simple API in its JSON form (PEP 691, ``Accept: application/vnd.pypi.simple.v1+json``) lists every
  torch file: final releases, their CPython wheels per platform, and (PEP 658/714) whether a wheel's METADATA
  can be read alone. PyPI's Linux wheel is one CUDA build; its METADATA pins that CUDA (wheel_metadata).
- PyTorch's index (``https://download.pytorch.org/whl/torch/``, written by pytorch/test-infra's
  s3_management/manage.py, ``to_simple_package_html``: one ``<a href="/whl/<variant>/<file>#sha256=...">``
  per wheel, the variant as the local version, ``torch-2.15.0+cu130-cp311-cp311-manylinux_2_28_x86_64.whl``)
  lists every variant: ``cpu``, ``cuXYZ`` and others (ROCm, XPU) this farm does not build.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import unquote, urljoin

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from wheelfoundry.catalog.wheel_metadata import metadata_cuda

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
PLATFORM = re.compile(r"^(manylinux|musllinux)_\d+_\d+_(x86_64|aarch64)$|^manylinux(1|2010|2014)_(x86_64|aarch64)$")
CUDA_LABEL = re.compile(r"^cu(\d{2,3})(\d)$")  # cu130 -> 13.0, cu126 -> 12.6, cu92 -> 9.2


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None = None
    yanked: bool = False
    core_metadata: bool = False  # PEP 658: <url>.metadata serves the wheel's METADATA


@dataclass(frozen=True)
class LinuxWheel:
    version: Version  # public version (the local label apart)
    variant: str | None  # the local label: cpu, cu130, rocm6.4 ...; None on PyPI
    python: str  # 3.11 (CPython with its own ABI; free-threaded and abi3 builds are not cells)
    platform: str  # x86_64 or aarch64


def cuda_of(label: str) -> str | None:
    """``cu130`` -> ``13.0``; None for cpu, ROCm, XPU."""
    match = CUDA_LABEL.fullmatch(label)
    return f"{match[1]}.{match[2]}" if match else None


def label_of(cuda: str | None) -> str:
    return "cpu" if not cuda else "cu" + cuda.replace(".", "")


def linux_wheel(filename: str) -> LinuxWheel | None:
    """A Linux CPython wheel's facts from its name; None for anything else (sdists, macOS, Windows, cp314t)."""
    try:
        _, version, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    for tag in tags:
        platform = PLATFORM.fullmatch(tag.platform)
        interpreter = re.fullmatch(r"cp(\d)(\d+)", tag.interpreter)
        if platform and interpreter and tag.abi == tag.interpreter:
            arch = platform[2] or platform[4]
            python = f"{interpreter[1]}.{interpreter[2]}"
            local = version.local
            return LinuxWheel(Version(version.public), local, python, arch)
    return None


def pypi_files(body: bytes, page_url: str) -> list[IndexFile]:
    """A PEP 691 project page's files (``core-metadata``, or PEP 658's older ``dist-info-metadata``)."""
    data = json.loads(body)
    found = []
    for raw in data.get("files", []):
        if not isinstance(raw, dict) or not isinstance(raw.get("filename"), str):
            continue
        metadata = raw.get("core-metadata", raw.get("dist-info-metadata", False))
        found.append(
            IndexFile(
                filename=raw["filename"],
                url=urljoin(page_url, str(raw.get("url", ""))),
                sha256=(raw.get("hashes") or {}).get("sha256"),
                yanked=bool(raw.get("yanked")),
                core_metadata=bool(metadata),
            )
        )
    return found


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[dict[str, str | None], str]] = []
        self._open: dict[str, str | None] | None = None
        self._text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open, self._text = dict(attrs), ""

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.found.append((self._open, self._text.strip()))
            self._open = None


def html_files(text: str, page_url: str) -> list[IndexFile]:
    """A PEP 503 project page's files (PyTorch's index): the link's text, else its path, names the file."""
    parser = _Anchors()
    parser.feed(text)
    found = []
    for attrs, label in parser.found:
        href = attrs.get("href") or ""
        url, _, fragment = href.partition("#")
        name = label or unquote(url.rsplit("/", 1)[-1])
        sha = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None
        metadata = attrs.get("data-core-metadata") or attrs.get("data-dist-info-metadata")
        yanked = "data-yanked" in attrs
        found.append(IndexFile(name, urljoin(page_url, url), sha, yanked, bool(metadata)))
    return found


@dataclass(frozen=True)
class TorchRelease:
    """One torch minor release line as published: its newest final patch and what it was published for."""

    minor: str  # 2.15
    versions: tuple[str, ...]  # final patches on PyPI, oldest first
    python: tuple[str, ...]  # Pythons of the newest patch's Linux x86_64 wheels on PyPI
    platforms: tuple[str, ...]  # Linux platforms PyPI has wheels of
    # variant label -> platform -> Pythons, from PyTorch's index (empty: that index was not read)
    variants: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)
    pypi_cuda: str | None = None  # the CUDA of PyPI's Linux x86_64 wheel, from its METADATA
    sources: Mapping[str, str] = field(default_factory=dict)  # fact -> where it was read

    @property
    def version(self) -> str:
        return self.versions[-1]

    def newest_wheel(self, files: Iterable[IndexFile], platform: str = "x86_64") -> IndexFile | None:
        """The newest patch's first Linux wheel on PyPI (whose METADATA tells its CUDA)."""
        for f in files:
            wheel = linux_wheel(f.filename)
            if wheel and str(wheel.version) == self.version and wheel.platform == platform and not f.yanked:
                return f
        return None


def _python_key(python: str) -> tuple[int, ...]:
    return tuple(int(p) for p in python.split("."))


def torch_releases(
    pypi: Iterable[IndexFile],
    pytorch: Iterable[IndexFile] | None,
    metadata: Mapping[str, str],
    sources: Mapping[str, str],
) -> list[TorchRelease]:
    """Every final torch minor on PyPI, its newest patch ``versions[-1]``; ``metadata``: version -> METADATA
    text of its PyPI Linux wheel, where it was read; ``sources``: "pypi", "pytorch", "metadata <version>" ->
    the URL each was read from (PyTorch's index None: not read, the variants unknown)."""
    pypi = list(pypi)
    by_version: dict[Version, list[LinuxWheel]] = defaultdict(list)
    for f in pypi:
        wheel = linux_wheel(f.filename)
        if wheel and not f.yanked and not wheel.version.is_prerelease and not wheel.version.is_devrelease:
            by_version[wheel.version].append(wheel)
    variants: dict[Version, dict[str, dict[str, set[str]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(set)))
    for f in pytorch or ():
        wheel = linux_wheel(f.filename)
        if wheel and wheel.variant and not f.yanked:
            variants[wheel.version][wheel.variant][wheel.platform].add(wheel.python)
    minors: dict[str, list[Version]] = defaultdict(list)
    for version in by_version:
        minors[f"{version.major}.{version.minor}"].append(version)
    releases = []
    for minor, versions in minors.items():
        versions.sort()
        newest = versions[-1]
        wheels = by_version[newest]
        found = variants.get(newest, {})
        cited = {"python": sources.get("pypi", ""), "platforms": sources.get("pypi", "")}
        if pytorch is not None:
            cited["variants"] = sources.get("pytorch", "")
        text = metadata.get(str(newest))
        if text is not None:
            cited["pypi_cuda"] = sources.get(f"metadata {newest}", sources.get("pypi", ""))
        releases.append(
            TorchRelease(
                minor=minor,
                versions=tuple(str(v) for v in versions),
                python=tuple(sorted({w.python for w in wheels if w.platform == "x86_64"}, key=_python_key)),
                platforms=tuple(sorted({w.platform for w in wheels})),
                variants={
                    label: {p: tuple(sorted(py, key=_python_key)) for p, py in sorted(plats.items())}
                    for label, plats in sorted(found.items())
                },
                pypi_cuda=metadata_cuda(text) if text else None,
                sources=cited,
            )
        )
    return sorted(releases, key=lambda r: Version(r.minor))


def requires_dist_text(info: Mapping[str, Any]) -> str:
    """PyPI's JSON API ``info`` (``/pypi/torch/<version>/json``) as METADATA lines the readers take."""
    lines = [f"Requires-Dist: {r}" for r in info.get("requires_dist") or [] if isinstance(r, str)]
    if isinstance(info.get("requires_python"), str):
        lines.append(f"Requires-Python: {info['requires_python']}")
    return "\n".join(lines) + "\n"
