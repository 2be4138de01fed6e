"""Was a failed compile stage's compiler killed for memory? The evidence, the unit, and the verdict's words.

When memory runs out the kernel's OOM killer ends the process it scores worst, a compiler (the runner
raises its compile stages' oom_score_adj, so never the runner itself), with SIGKILL; the compiler's driver
then says so in the build's output (gcc: ``Killed signal terminated program cc1plus``; nvcc: ``'cicc' died
due to signal 9 (Kill signal)``; ninja or make: the failed command, exit status 137). A kill by signal is not
proof: the evidence, strongest first, is the kernel's own log (/dev/kmsg: ``Out of memory: Killed process
<pid> (cicc) ... anon-rss:...``) naming a compiler of the stage (wfbuild.compiling.memwatch knows its pids and
units), the memory cgroup's ``oom_kill`` counter having risen while the stage ran, or the stage's compilers
having held nearly all the memory they were given when one was killed.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wfbuild.compiling.memwatch import Proc

KILL = re.compile(
    r"(?:Memory cgroup out of memory|Out of memory)[^:]*: Killed process (?P<pid>\d+) \((?P<comm>[^)]*)\)"
    r"(?:.*?anon-rss:(?P<anon>\d+)kB)?(?:.*?file-rss:(?P<file>\d+)kB)?"
)
SIGNATURE = re.compile(
    r"Killed signal terminated program (?P<gcc>\S+)|'(?P<nvcc>[^']+)' died due to signal 9|killed by signal 9|"
    r"signal 9 \(Kill|exit (?:code|status) (?:137|-9)|Error 137|^\s*Killed\s*$",
    re.IGNORECASE,
)
NEAR_FULL = 0.85  # the compilers held this share of their memory when one was killed: memory killed it


@dataclass(frozen=True)
class Kill:
    """A kernel log record of an OOM kill."""

    pid: int
    comm: str
    rss_mib: int


@dataclass(frozen=True)
class Oom:
    """A compile killed for memory: which unit (and tool), its peak, how we know, and the stage's figures."""

    unit: str
    tool: str
    peak_mib: int
    how: str
    at_once: int  # the most compilers of the stage at one moment
    mib_at_once: int  # and the most memory they held together

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def kernel_log_position() -> int | None:
    """The sequence number of the kernel log's newest record (/dev/kmsg), None where it cannot be read."""
    records = _kmsg()
    if records is None:
        return None
    return max((seq for seq, _ in records), default=-1)


def kernel_kills(after: int | None) -> list[Kill]:
    """OOM kills the kernel logged after record ``after`` (None: the log was not readable before: none)."""
    if after is None:
        return []
    records = _kmsg() or []
    kills = []
    for seq, text in records:
        found = KILL.search(text) if seq > after else None
        if found:
            kib = int(found.group("anon") or 0) + int(found.group("file") or 0)
            kills.append(Kill(int(found.group("pid")), found.group("comm"), round(kib / 1024)))
    return kills


def _kmsg() -> list[tuple[int, str]] | None:
    """Every record in the kernel's log buffer as (sequence, text); None where /dev/kmsg is not ours to read."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    records = []
    try:
        while True:
            try:
                raw = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while read: skip to the next record
                    continue
                break  # EAGAIN: nothing more
            if not raw:
                break
            head, _, text = raw.decode("utf-8", "replace").partition(";")
            fields = head.split(",")
            if len(fields) > 1 and fields[1].isdigit():
                records.append((int(fields[1]), text.split("\n", 1)[0]))
    finally:
        os.close(fd)
    return records


def killed_tool(lines: Iterable[str]) -> str | None:
    """The compiler the build's output says was killed by SIGKILL ("" when it says only that one was)."""
    found = None
    for line in lines:
        match = SIGNATURE.search(line)
        if match:
            found = match.group("gcc") or match.group("nvcc") or found or ""
    return found


def diagnose(
    tail: Sequence[str],
    procs: Mapping[int, Proc],
    report: Mapping[str, Any] | None,
    kills: Sequence[Kill],
    counter_delta: int,
    budget_mib: float,
) -> Oom | None:
    """Whether the failed stage's compiler was killed for memory: an Oom, or None (another failure)."""
    tool = killed_tool(tail)
    report = report or {}
    at_once, held = int(report.get("compilers_at_once") or 0), int(report.get("compilers_mib_at_once") or 0)
    ours = [k for k in kills if k.pid in procs and procs[k.pid].tool[:15] == k.comm]  # pid and name: not a reuse
    if ours:
        victim = procs[ours[-1].pid]
        how = f"the kernel's OOM killer ended {victim.tool} (pid {ours[-1].pid}, {ours[-1].rss_mib} MiB resident)"
        return Oom(victim.unit, victim.tool, max(round(victim.peak_kib / 1024), ours[-1].rss_mib), how, at_once, held)
    if tool is None:
        return None
    named = [k for k in kills if not tool or k.comm == tool or tool.endswith("/" + k.comm)]
    if named:
        how = f"the kernel's OOM killer ended {named[-1].comm} (pid {named[-1].pid}, {named[-1].rss_mib} MiB resident)"
    elif counter_delta > 0:
        how = f"killed by signal 9 while the memory cgroup's oom_kill count rose by {counter_delta}"
    elif budget_mib > 0 and held >= NEAR_FULL * budget_mib:
        how = f"killed by signal 9 when its compilers held {held} MiB of the {budget_mib:.0f} MiB they were given"
    else:
        return None
    guess = _largest(procs.values(), os.path.basename(tool) if tool else "")
    if guess is None:
        return Oom("(unknown unit)", os.path.basename(tool or "compiler"), 0, how, at_once, held)
    return Oom(guess.unit, guess.tool, round(guess.peak_kib / 1024), how, at_once, held)


def _largest(procs: Iterable[Proc], tool: str) -> Proc | None:
    """The killed unit's best guess where the kernel did not name its pid: the largest of the named tool's
    processes (the OOM killer ends the process holding the most), else of all the stage's compilers."""
    pool = list(procs)
    mine = [p for p in pool if p.tool == tool] or pool
    return max(mine, key=lambda p: p.peak_kib, default=None)
