"""Which (torch, CUDA, Python, platform) cells a channel's published wheels already serve.

Read from the channel's index state (``simple/<channel>/.index-state.json``, wheelfoundry.publishing.index): per wheel,
its file name (project, version, Python and platform tags) and its ``variants``, the (torch, CUDA) pairs
Merge recorded for it (``torch-2.13.0+cu130``). A merged wheel lists every build it holds, a per-cell wheel
its one. A cell is a torch *minor* release: the farm builds an extension per minor (its merged wheel requires
``torch>=2.13,<2.14``, its per-cell label is ``pt213cu130``), so a new patch release of torch is already
served by the wheels of its minor. An abi3 or py3Y-none wheel serves every CPython from its tag's on.

A stable-ABI wheel (its label ``abi213cpu``, ``abi210cu13``: its torch floor and CUDA major, planning.cells)
may serve a torch release it was never tested on: :meth:`Coverage.stable_wheel` names it, and the watcher
tests it there before anything is built (watch.watcher).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from wheelfoundry.request.stable_wheels import kind_of, stable_label, tag_python

VARIANT = re.compile(r"^torch-(?P<torch>[0-9][0-9a-z.]*)\+(?P<label>cpu|cu[0-9]{2,4})$")
PLATFORM = re.compile(r"(x86_64|aarch64)$")


@dataclass(frozen=True)
class Served:
    project: str  # normalized
    version: str  # public version
    python: tuple[int, int]  # (3, 11)
    abi3: bool  # serves every CPython >= python (cpXY-abi3, py3Y-none)
    platform: str
    minor: str  # torch 2.13
    label: str  # cpu, cu130
    key: str = ""  # the wheel's S3 key
    floor: str | None = None  # a stable-ABI wheel's torch floor (2.13); None: built for its torch minors only
    kind: str = ""  # a stable wheel's CUDA major: cpu, cu13


def _minor(version: str) -> str | None:
    try:
        parsed = Version(version)
    except InvalidVersion:
        return None
    return f"{parsed.major}.{parsed.minor}"


def served(state: Mapping[str, Any]) -> list[Served]:
    """Every cell the channel's wheels serve, from its index state (``{"wheels": {key: {"variants": [...]}}}``)."""
    found = []
    for key, entry in (state.get("wheels") or {}).items():
        try:
            name, version, _, tags = parse_wheel_filename(str(key).rsplit("/", 1)[-1])
        except InvalidWheelFilename:
            continue
        if isinstance(entry, Mapping) and entry.get("yanked") is not None:
            continue  # withdrawn (PEP 592): it serves no cell, so the watcher builds those cells again
        variants = entry.get("variants") if isinstance(entry, Mapping) else None
        floor, kind = stable_label(version) or (None, "")
        for tag in tags:
            python = tag_python(tag)
            platform = PLATFORM.search(tag.platform)
            if not python or not platform:
                continue
            for variant in variants or ():
                match = VARIANT.match(str(variant))
                minor = _minor(match["torch"]) if match else None
                if match and minor:
                    found.append(
                        Served(
                            canonicalize_name(name),
                            version.public,
                            python[0],
                            python[1],
                            platform[1],
                            minor,
                            match["label"],
                            str(key),
                            floor,
                            kind,
                        )
                    )
    return found


@dataclass(frozen=True)
class Coverage:
    cells: tuple[Served, ...]

    @classmethod
    def of(cls, states: Iterable[Mapping[str, Any]]) -> Coverage:
        return cls(tuple(s for state in states for s in served(state)))

    def has(self, project: str, version: str | None, python: str, platform: str, minor: str, label: str) -> bool:
        """Whether a published wheel serves this cell (``version`` None: any version of the project)."""
        major, minor_py = (int(p) for p in python.split("."))
        project = canonicalize_name(project)
        for s in self.cells:
            if (s.project, s.platform, s.minor, s.label) != (project, platform, minor, label):
                continue
            if version is not None and Version(s.version) != Version(version):
                continue
            if s.python == (major, minor_py) or (s.abi3 and s.python <= (major, minor_py)):
                return True
        return False

    def stable_wheel(self, project: str, version: str | None, python: str, platform: str, minor: str, label: str
                     ) -> Served | None:  # fmt: skip
        """A published stable-ABI wheel that may serve this cell untested: the package version, platform and
        Python, the cell's CUDA major (cu130 -> a cu13 wheel), a floor at or below the cell's torch; the newest
        version, then the newest floor (the closest build)."""
        want = (int(p) for p in python.split("."))
        py, project, kind = tuple(want), canonicalize_name(project), kind_of(label)
        found = [
            s
            for s in self.cells
            if s.floor is not None
            and (s.project, s.platform, s.kind) == (project, platform, kind)
            and (version is None or Version(s.version) == Version(version))
            and Version(s.floor) <= Version(minor)
            and (s.python == py or (s.abi3 and s.python <= py))
        ]
        return max(found, key=lambda s: (Version(s.version), Version(s.floor or "0"), s.key), default=None)

    def has_version(self, project: str, version: str | None) -> bool:
        """Whether any wheel of the project (at that version) is published: a new one cannot reuse its names."""
        project = canonicalize_name(project)
        return any(
            s.project == project and (version is None or Version(s.version) == Version(version)) for s in self.cells
        )
