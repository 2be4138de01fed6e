"""What an extension's source holds, for a first run's estimate: its C/C++ and CUDA translation units.

Until a package's own runs have been recorded (wheelfoundry.planning.calibration), a cell's compile work is
modelled from the units it compiles (wheelfoundry.planning.calibration ``profiled_work``): a CPU cell compiles the
C/C++ units, a CUDA cell those and its ``.cu`` files once per architecture. Units under a tests, docs,
examples or benchmarks folder are not counted: setup.py files do not build them. Reading a sdist lists
its members and opens none of them (no code of the package runs).
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

CPP_SUFFIXES = frozenset({".c", ".cc", ".cpp", ".cxx"})
CUDA_SUFFIXES = frozenset({".cu"})
SKIPPED_DIRS = frozenset({"test", "tests", "doc", "docs", "example", "examples", "benchmark", "benchmarks", "bench"})


@dataclass(frozen=True)
class SourceProfile:
    cpp_units: int
    cu_units: int

    def units(self, cuda: bool) -> int:
        """Translation units one cell compiles (a CPU cell leaves the .cu files out)."""
        return self.cpp_units + (self.cu_units if cuda else 0)

    def describe(self) -> str:
        return f"{self.cpp_units} C/C++ and {self.cu_units} CUDA unit(s)"


def profile(names: Iterable[str]) -> SourceProfile:
    """The profile of a source given its file names (paths relative to anything)."""
    cpp = cu = 0
    for name in names:
        path = PurePosixPath(name)
        if any(part.lower() in SKIPPED_DIRS for part in path.parts[:-1]):
            continue
        suffix = path.suffix.lower()
        cpp += suffix in CPP_SUFFIXES
        cu += suffix in CUDA_SUFFIXES
    return SourceProfile(cpp, cu)


def from_path(path: Path) -> SourceProfile:
    """A source folder's or an sdist's (``.tar.gz``) profile; ValueError for anything else."""
    if path.is_dir():
        return profile(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
    if path.is_file() and path.name.endswith((".tar.gz", ".tgz")):
        try:
            with tarfile.open(path, "r:gz") as archive:
                # An sdist's first folder is name-version/: a tests folder of the package starts below it.
                return profile(m.name.split("/", 1)[-1] for m in archive.getmembers() if m.isfile())
        except (OSError, tarfile.TarError) as exc:
            raise ValueError(f"{path}: not a readable sdist ({exc})") from exc
    raise ValueError(f"{path}: expected a source folder or an sdist .tar.gz")
