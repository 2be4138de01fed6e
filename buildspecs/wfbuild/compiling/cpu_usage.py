"""What a job's compile stages used: CPU seconds, wall seconds, and cores busy = CPU / wall / cores.

``python3 -m wfbuild.compiling.cpu_usage --out FILE -- ARGV...`` runs one compile stage and writes its wall
seconds and the CPU seconds of every process of it that was waited for (getrusage(RUSAGE_CHILDREN):
make, ninja, setuptools' compilers and their children), in host mode and inside a builder container
alike. Compiles that sccache runs are children of its server, not of the stage: the server's own CPU
(``server_cpu_seconds``, from /proc) joins the job's total. ``summary`` is what the manifest keeps:
one job's compile stages together, wall being the time any of them ran (cells overlap).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return float(usage.ru_utime + usage.ru_stime)


OOM_SCORE_ADJ = 500  # compile stages: the kernel's OOM killer takes a compiler, never the runner


def prefer_oom_kill(adj: int = OOM_SCORE_ADJ) -> None:
    """Raise this process's (and so its children's) oom_score_adj: when memory runs out the kernel ends one
    of the stage's compilers, not the runner that explains the failure or the SSM agent. Raising needs no
    privilege; where /proc does not allow it, nothing changes."""
    try:
        with open("/proc/self/oom_score_adj", "w", encoding="ascii") as handle:
            handle.write(str(adj))
    except OSError:
        pass


def measure(argv: list[str], out: Path, environ: Mapping[str, str] | None = None) -> int:
    """Run ``argv``; write {cpu_seconds, wall_seconds, cores, exit_status} to ``out``; its exit status."""
    prefer_oom_kill()
    before, started = children_cpu(), time.monotonic()
    try:
        code = subprocess.run(argv, env=None if environ is None else dict(environ), check=False).returncode
    except OSError as exc:
        print(f"wfbuild.compiling.cpu_usage: cannot start {argv[0]}: {exc}", file=sys.stderr)
        code = 127
    record = {
        "cpu_seconds": round(children_cpu() - before, 2),
        "wall_seconds": round(time.monotonic() - started, 2),
        "cores": cores(),
        "exit_status": code,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record), encoding="utf-8")
    return code


def process_cpu(pid: int) -> float | None:
    """A process's CPU seconds with those of the children it reaped (/proc/PID/stat), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks  # utime stime cutime cstime


def server_cpu(port: str) -> float | None:
    """CPU seconds of the sccache server listening on ``port`` (this user's processes), or None."""
    wanted = f"SCCACHE_SERVER_PORT={port}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "sccache":
                continue
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                return process_cpu(int(entry.name))
        except OSError:
            continue
    return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


def summary(
    stages: Iterable[Mapping[str, Any]], usage: Mapping[str, Mapping[str, Any]], server_seconds: float = 0.0
) -> dict[str, Any] | None:
    """The job's compile stages (``usage``: stage name -> its record) as one figure; None without any.

    ``server_seconds``: a job-wide compiler cache server's CPU (host mode), given to the stages in
    proportion to their wall seconds (``stage_cpu_seconds``: each stage's share included)."""
    found = []
    for stage in stages:
        record = usage.get(str(stage.get("name")))
        if not record or stage.get("status") == "retried":  # a stage run again: its usage is the last run's
            continue
        seconds, wall = _number(record.get("cpu_seconds")), _number(record.get("wall_seconds"))
        start, end = _number(stage.get("started_at")), _number(stage.get("ended_at"))
        if seconds is None or wall is None or start is None or end is None:
            continue
        found.append((str(stage.get("name")), seconds, wall, start, end, int(_number(record.get("cores")) or 0)))
    machine = max((f[5] for f in found), default=0)
    if not found or machine < 1:
        return None
    stage_wall = sum(f[2] for f in found)
    shares = {
        name: round(seconds + (server_seconds * wall / stage_wall if stage_wall > 0 else 0.0), 2)
        for name, seconds, wall, *_ in found
    }
    cpu = sum(f[1] for f in found) + server_seconds
    wall, reach = 0.0, -1.0
    for _, _, _, start, end, _ in sorted(found, key=lambda f: f[3]):  # the union: overlapping cells count once
        wall += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    wall = max(wall, 0.01)
    return {
        "cpu_seconds": round(cpu, 2),
        "wall_seconds": round(wall, 2),
        "cores": machine,
        "cores_busy": round(cpu / wall / machine, 3),
        "stages": len(found),
        # Cores one running compile stage kept busy on average: a cell's width, what the planner sizes by.
        "cores_per_stage": round(cpu / stage_wall, 3) if stage_wall > 0 else None,
        "stage_cpu_seconds": shares,
    }


def describe(usage: Mapping[str, Any]) -> str:
    return (
        f"compile stages: {usage['cpu_seconds']:.0f} CPU-s in {usage['wall_seconds']:.0f} s on {usage['cores']} "
        f"cores: cores busy {usage['cores_busy']:.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python3 -m wfbuild.compiling.cpu_usage", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where the stage's record goes (JSON)")
    parser.add_argument("argv", nargs="+", help="the stage's command, after --")
    args = parser.parse_args(argv)
    return measure(args.argv, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
