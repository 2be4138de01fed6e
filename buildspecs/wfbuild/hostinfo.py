"""This host as the runner sees it: its cores, its memory, and whether it can build a job's platform."""

from __future__ import annotations

import os


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def memory_gib() -> float:
    """This host's memory (MemTotal), 0 when /proc/meminfo cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return 0.0


MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def platform_problem(job_platform: str, machine: str) -> str | None:
    """Why this host cannot build the job's platform (None: it can)."""
    host = MACHINES.get(machine.lower(), machine)
    if host == job_platform:
        return None
    return (
        f"this host is {host}: {job_platform} jobs run on {job_platform} instances "
        f"(the launch template for {job_platform}); builds are never cross-compiled"
    )
