"""Were a wheel's binaries compiled by this build? ``python3 -m wfbuild.wheels.built_here`` (build-library.sh).

Some setup.py files publish somebody else's binary: causal-conv1d 1.7.0's ``bdist_wheel`` (its PyPI
sdist) downloads a prebuilt wheel from the project's GitHub releases unless CAUSAL_CONV1D_FORCE_BUILD=TRUE
and hands that over as the build's result; flash-attn and mamba-ssm do the same. On a build host with a
network the cell then "succeeds" with a binary it never compiled, and the farm would sign provenance
saying it built it from the pinned source. A setuptools build compiles in the source tree
(wfbuild.wheels.wheel_build builds a directory in place: build/temp*, build/lib*), so every ELF file of its wheel
was first written there during the build; one whose bytes no file written under the tree since the build
started holds was not compiled here, and the stage fails naming it. Only for setuptools (build-library.sh's
default backend): scikit-build-core and others may build in a temporary folder outside the tree.

This is a check of honest packages, inside the build's own container: a hostile build could defeat it,
as it could anything that runs beside it (docs/security.md).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import stat
import sys
import zipfile
from pathlib import Path

ELF = b"\x7fELF"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def wheel_binaries(wheel: Path) -> dict[str, tuple[int, str]]:
    """The wheel's ELF members: name -> (size, sha256)."""
    found: dict[str, tuple[int, str]] = {}
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if info.is_dir() or info.file_size < len(ELF):
                continue
            data = archive.read(info)
            if data.startswith(ELF):
                found[info.filename] = (info.file_size, _sha256(data))
    return found


def written_since(tree: Path, since: float, sizes: set[int]) -> set[str]:
    """sha256 of the files under ``tree`` (links not followed) modified at or after ``since`` whose size
    is one of ``sizes`` (only those can be a wheel's binary: the rest are never read)."""
    digests = set()
    for folder, _dirs, files in os.walk(tree, followlinks=False):
        for name in files:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_size not in sizes or st.st_mtime < since:
                continue
            with open(path, "rb") as handle:
                digests.add(_sha256(handle.read()))
    return digests


def foreign(wheel: Path, tree: Path, since: float) -> list[str]:
    """The wheel's ELF members that no file written under ``tree`` since ``since`` matches, byte for byte."""
    binaries = wheel_binaries(wheel)
    if not binaries:
        return []
    local = written_since(tree, since, {size for size, _ in binaries.values()})
    return sorted(name for name, (_, digest) in binaries.items() if digest not in local)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel-dir", type=Path, required=True, help="the wheels built (newer than --marker)")
    parser.add_argument("--tree", type=Path, required=True, help="the source tree the build ran in")
    parser.add_argument("--marker", type=Path, required=True, help="a file touched just before the build")
    args = parser.parse_args(argv)
    since = args.marker.stat().st_mtime
    wheels = sorted(w for w in args.wheel_dir.glob("*.whl") if w.stat().st_mtime >= since)
    problems = [(wheel.name, name) for wheel in wheels for name in foreign(wheel, args.tree, since)]
    for wheel_name, name in problems:
        print(
            f"{name} in {wheel_name} was not compiled by this build: no file with its bytes was written under"
            " the source tree while the package was built. The package's setup.py may have fetched a prebuilt wheel;"
            " if it has a switch to build from source (causal-conv1d: CAUSAL_CONV1D_FORCE_BUILD=TRUE), set it"
            " in the request's build_env.",
            file=sys.stderr,
        )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
