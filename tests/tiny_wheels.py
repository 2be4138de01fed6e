"""Tiny pure-Python wheels with chosen METADATA (Requires-Dist, a local label), for index and resolver tests."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Sequence
from pathlib import Path


def pure_wheel(dest: Path, project: str, version: str, requires: Sequence[str] = (), code: str = "") -> Path:
    """``<module>-<version>-py3-none-any.whl``: one module named after the project, METADATA with ``requires``."""
    module = project.replace("-", "_").replace(".", "_")
    dist = f"{module}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{module}/__init__.py": (code or f"VERSION = {version!r}\n").encode(),
        f"{dist}/METADATA": metadata.encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: wheelfoundry-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    files[f"{dist}/RECORD"] = ("\n".join([*record, f"{dist}/RECORD,,"]) + "\n").encode()
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
    return path


def metadata_of(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return archive.read(name)
