"""wfbuild.compiling.cpu_usage: a compile stage's CPU and wall seconds, measured on real processes, and one job's figure."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from wfbuild.compiling import cpu_usage

# Each child burns 0.4 s of its own CPU time (not of the clock: the figure holds on a loaded machine).
BURN = "import time\nwhile time.process_time() < 0.4: pass\n"


def test_measure_counts_the_cpu_of_every_process_of_the_stage(tmp_path: Path) -> None:
    out = tmp_path / "usage" / "build-x.json"
    script = f'"{sys.executable}" -c "$BURN" & "{sys.executable}" -c "$BURN" & wait; exit 3'
    code = cpu_usage.measure(["sh", "-c", script], out, {"BURN": BURN, "PATH": "/usr/bin:/bin"})
    record = json.loads(out.read_text())
    assert code == 3 and record["exit_status"] == 3  # the stage's own status, passed on
    assert 0.8 <= record["cpu_seconds"] < 5  # two grandchildren, both waited for by the shell
    assert record["wall_seconds"] > 0 and record["cores"] == cpu_usage.cores()


def test_summary_counts_overlapping_cells_once_and_shares_the_cache_servers_cpu() -> None:
    stages = [
        {"name": "env-a", "started_at": 0.0, "ended_at": 5.0},
        {"name": "build-a", "started_at": 10.0, "ended_at": 30.0},
        {"name": "build-b", "started_at": 20.0, "ended_at": 40.0},
        {"name": "build-c", "started_at": 50.0, "ended_at": 60.0},
    ]
    usage = {
        "build-a": {"cpu_seconds": 30.0, "wall_seconds": 20.0, "cores": 4},
        "build-b": {"cpu_seconds": 20.0, "wall_seconds": 20.0, "cores": 4},
        "build-c": {"cpu_seconds": "lots", "wall_seconds": 10.0, "cores": 4},  # not a number: left out
    }
    summary = cpu_usage.summary(stages, usage, server_seconds=10.0)
    assert summary == {
        "cpu_seconds": 60.0,
        "wall_seconds": 30.0,  # 10..40, the two cells' union
        "cores": 4,
        "cores_busy": 0.5,
        "stages": 2,
        "cores_per_stage": 1.5,
        # the server's 10 s shared by wall: 20 s each of 40
        "stage_cpu_seconds": {"build-a": 35.0, "build-b": 25.0},
    }
    assert "cores busy 0.50" in cpu_usage.describe(summary)
    assert cpu_usage.summary(stages[:1], usage) is None
