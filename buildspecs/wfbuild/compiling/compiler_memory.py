"""Memory one compiler is planned at, from the largest unit a run measured: the planner's rule
(functions/wheelfoundry/planning/compiler_memory.py; the Lambda package is not in this bundle), applied by the runner
to an earlier attempt's peak, so a relaunch prints and uses the figure a plan from the same peak would.
tests/test_compiler_memory.py holds the two to the same figure and the same words for any peak.
"""

from __future__ import annotations

HEADROOM = 1.2
FLOOR_GIB = 0.25


def recorded_gib(peak_mib: float) -> float:
    return round(peak_mib / 1024, 3)


def gib_per_compiler(peak_gib: float) -> float:
    return round(max(FLOOR_GIB, peak_gib * HEADROOM), 2)


def words(gib: float) -> str:
    return f"{gib:g} GiB"
