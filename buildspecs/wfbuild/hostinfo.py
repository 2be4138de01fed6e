"""This host as the runner sees it: its cores, its memory, and whether it can build a job's platform."""

from __future__ import annotations

import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
SELF_CGROUP = Path("/proc/self/cgroup")
NO_LIMIT = 1 << 60  # cgroup v1 writes "no limit" as a page-rounded 2**63


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def memory_gib() -> float:
    """The memory this runner's processes may use: the host's (MemTotal), or its memory cgroup's limit where
    that is lower (a container's ``--memory``, CodeBuild's build container, a test's cgroup): the kernel's
    OOM killer acts at the limit, so compilers are counted against it. 0 when /proc/meminfo cannot be read."""
    total = 0.0
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) / 1024 / 1024
                    break
    except OSError:
        pass
    limit = cgroup_limit_bytes()
    return min(total, limit / 1024**3) if limit and total else total


def cgroup_dir() -> tuple[Path, int] | None:
    """This process's memory cgroup folder and its version (1 or 2), where it can be found."""
    try:
        lines = SELF_CGROUP.read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    for line in lines:  # v1: "4:memory:/path"; v2: "0::/path"
        parts = line.split(":", 2)
        if len(parts) == 3 and "memory" in parts[1].split(","):
            folder = CGROUP_ROOT / "memory" / parts[2].lstrip("/")
            if folder.is_dir():
                return folder, 1
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[0] == "0" and parts[1] == "":
            folder = CGROUP_ROOT / parts[2].lstrip("/")
            if (folder / "memory.max").is_file() or (folder / "memory.events").is_file():
                return folder, 2
    return None


def cgroup_limit_bytes() -> int | None:
    """The lowest memory limit over this process's cgroup and its ancestors; None: none (or unreadable)."""
    found = cgroup_dir()
    if found is None:
        return None
    folder, version = found
    limits: list[int] = []
    if version == 1:
        try:  # the limit in force, an ancestor's included
            for line in (folder / "memory.stat").read_text(encoding="ascii").splitlines():
                if line.startswith("hierarchical_memory_limit "):
                    limits.append(int(line.split()[1]))
        except (OSError, ValueError):
            pass
        limits += _ints([folder / "memory.limit_in_bytes"])
    else:
        chain = [folder, *folder.parents]
        limits += _ints([f / "memory.max" for f in chain if f == CGROUP_ROOT or CGROUP_ROOT in f.parents])
    limits = [n for n in limits if 0 < n < NO_LIMIT]
    return min(limits) if limits else None


def _ints(paths: list[Path]) -> list[int]:
    out = []
    for path in paths:
        try:
            text = path.read_text(encoding="ascii").strip()
        except OSError:
            continue
        if text.isdigit():
            out.append(int(text))
    return out


def oom_kills() -> int | None:
    """How many processes the kernel's OOM killer has ended in this process's memory cgroup (v1
    memory.oom_control, v2 memory.events ``oom_kill``); None where the cgroup does not say."""
    found = cgroup_dir()
    if found is None:
        return None
    folder, version = found
    name = "memory.oom_control" if version == 1 else "memory.events"
    try:
        for line in (folder / name).read_text(encoding="ascii").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    except OSError:
        return None
    return None


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
