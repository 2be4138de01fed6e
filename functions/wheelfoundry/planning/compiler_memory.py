"""Memory one compiler is planned at, from the largest unit a run of the source measured: one rule, one figure.

A recorded peak (MiB, wfbuild.compiling.memwatch) is kept in GiB to three places (``recorded_gib``: calibration's
record); a compiler is planned at that times the headroom, at least the floor, to two places
(``gib_per_compiler``). The runner sizes a relaunch by an earlier attempt's peak with the same two steps
(buildspecs/wfbuild/compiling/compiler_memory.py: the on-instance bundle cannot import this package);
tests/test_compiler_memory.py holds the two to the same figure and the same words for any peak.
"""

from __future__ import annotations

HEADROOM = 1.2  # a compiler is planned at its unit's recorded peak times this
FLOOR_GIB = 0.25


def recorded_gib(peak_mib: float) -> float:
    """A measured peak as calibration records it."""
    return round(peak_mib / 1024, 3)


def gib_per_compiler(peak_gib: float) -> float:
    """Memory to plan one compiler (and each further nvcc thread) at, from a recorded peak."""
    return round(max(FLOOR_GIB, peak_gib * HEADROOM), 2)


def words(gib: float) -> str:
    """The figure as the plan, the runner's log, the manifest's reader and ``status`` print it."""
    return f"{gib:g} GiB"
