"""Reading wheels, and rewriting them with the ``wheel`` tool (``wheel unpack`` / ``wheel pack``).

``wheel pack`` regenerates RECORD and takes the file name from the .dist-info directory and the
WHEEL tags, so a rewrite only has to change files and directory names.
"""

from __future__ import annotations

import contextlib
import email.parser
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import BinaryIO

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from wfbuild.safety import LABEL, check


@dataclass(frozen=True)
class WheelInfo:
    filename: str
    project: str  # normalized (PEP 503)
    version: str
    tags: list[str]
    size: int
    sha256: str
    requires_python: str
    requires_dist: list[str]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _dist_info(names: list[str]) -> str:
    dirs = {n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")}
    if len(dirs) != 1:
        raise ValueError(f"expected one .dist-info directory, found {sorted(dirs)}")
    return dirs.pop()


def metadata_bytes(wheel: Path | BinaryIO) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(f"{_dist_info(zf.namelist())}/METADATA")


def metadata(wheel: Path) -> Message:
    return email.parser.BytesParser().parsebytes(metadata_bytes(wheel), headersonly=True)


def info(wheel: Path) -> WheelInfo:
    name, version, _build, tags = parse_wheel_filename(wheel.name)
    meta = metadata(wheel)
    return WheelInfo(
        filename=wheel.name,
        project=str(name),
        version=str(version),
        tags=sorted(str(t) for t in tags),
        size=wheel.stat().st_size,
        sha256=sha256_of(wheel),
        requires_python=meta.get("Requires-Python", "") or "",
        requires_dist=list(meta.get_all("Requires-Dist") or []),
    )


def top_level_modules(wheel: Path) -> list[str]:
    """Importable top-level names: top_level.txt when setuptools wrote one, else what RECORD holds."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        top = f"{_dist_info(names)}/top_level.txt"
        if top in names:
            found = [line.strip() for line in zf.read(top).decode().splitlines() if line.strip()]
            return sorted({m for m in found if "/" not in m})
    modules = set()
    for name in names:
        first = name.split("/", 1)[0]
        if first.endswith((".dist-info", ".data", ".libs")) or first == "__pycache__":
            continue
        if "/" in name:
            modules.add(first)
        elif first.endswith((".py", ".so")):
            modules.add(first.split(".", 1)[0])
    return sorted(m for m in modules if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", m))


def entry_points(wheel: Path, group: str) -> list[str]:
    """The names of one entry point group's entries."""
    with zipfile.ZipFile(wheel) as zf:
        path = f"{_dist_info(zf.namelist())}/entry_points.txt"
        if path not in zf.namelist():
            return []
        text = zf.read(path).decode()
    out, current = [], None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip()
        elif line and not line.startswith(("#", ";")) and current == group and "=" in line:
            out.append(line.split("=", 1)[0].strip())
    return out


def _tool(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "wheel", *args], check=True, stdout=subprocess.DEVNULL)


@contextlib.contextmanager
def rewrite(wheel: Path, out_dir: Path, local_version: str | None = None) -> Iterator[Path]:
    """Unpack ``wheel``, let the caller change the tree, pack it into ``out_dir`` (the new file only).

    ``local_version`` replaces the version's local label (``wheel pack --local-version`` rewrites
    METADATA's Version and the .dist-info name; the .data directory is renamed here).
    """
    with tempfile.TemporaryDirectory(prefix="wf-wheel-") as tmp:
        _tool("unpack", "--dest", tmp, str(wheel))
        (root,) = Path(tmp).iterdir()
        yield root
        extra = []
        if local_version is not None:
            check(LABEL, local_version, "local version label")
            _rename_data_dir(root, local_version)
            extra = ["--local-version", local_version]
        packed = Path(tmp) / "packed"
        packed.mkdir()
        _tool("pack", "--dest-dir", str(packed), *extra, str(root))
        (new,) = packed.iterdir()
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.move(str(new), out_dir / new.name)


def _tree_dist_info(root: Path) -> Path:
    (found,) = [p for p in root.iterdir() if p.name.endswith(".dist-info")]
    return found


def _rename_data_dir(root: Path, label: str) -> None:
    stem = _tree_dist_info(root).name[: -len(".dist-info")]
    name, version = stem.rsplit("-", 1)
    data = root / f"{stem}.data"
    if data.exists():
        data.rename(root / f"{name}-{version.split('+', 1)[0]}+{label}.data")


def missing_requirements(requires_dist: list[str], wanted: list[str]) -> list[str]:
    """The ``wanted`` requirements whose project the wheel does not already require."""
    have = {canonicalize_name(Requirement(r).name) for r in requires_dist}
    return [w for w in wanted if canonicalize_name(Requirement(w).name) not in have]


def add_requirements(root: Path, requirements: list[str]) -> None:
    """Append Requires-Dist lines to METADATA's header (before the description body)."""
    meta_path = _tree_dist_info(root) / "METADATA"
    text = meta_path.read_text(encoding="utf-8")
    head, sep, body = text.partition("\n\n")
    lines = "".join(f"\nRequires-Dist: {Requirement(r)}" for r in requirements)
    meta_path.write_text(head.rstrip("\n") + lines + (sep + body if sep else "\n"), encoding="utf-8")


def pin_requirement(root: Path, requirement: str) -> bool:
    """Make ``requirement`` the wheel's only unconditional Requires-Dist of its project (a cell wheel's
    ``torch>=2.11,<2.12``: the resolver refuses it beside another torch). False: METADATA had it already."""
    wanted = Requirement(requirement)
    meta_path = _tree_dist_info(root) / "METADATA"
    text = meta_path.read_text(encoding="utf-8")
    head, sep, body = text.partition("\n\n")
    kept = []
    for line in head.splitlines():
        key, _, value = line.partition(":")
        if key == "Requires-Dist":
            have = Requirement(value.strip())
            if canonicalize_name(have.name) == canonicalize_name(wanted.name) and have.marker is None:
                if str(have) == str(wanted):
                    return False
                continue  # an unpinned (or otherwise pinned) torch gives way; one with a marker (an extra) stays
        kept.append(line)
    kept.append(f"Requires-Dist: {wanted}")
    meta_path.write_text("\n".join(kept) + "\n" + (sep + body if sep else "\n"), encoding="utf-8")
    return True


def torch_floor(minor: str) -> str:
    """``torch>=2.10``: a stable-ABI wheel serves every torch from the oldest of its range on (issue 66)."""
    major, low = Version(minor).release[:2]
    return f"torch>={major}.{low}"


def torch_pin(torch_version: str) -> str:
    """``torch>=2.11,<2.12``: the torch minor a cell wheel was built against (wheelfoundry.publishing.merge's rule
    for one
    release; the Lambda package is not in the bundle, so tests hold the two equal)."""
    major, minor = Version(torch_version).release[:2]
    return f"torch>={major}.{minor},<{major}.{minor + 1}"
