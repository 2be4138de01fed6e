"""Run a command on slower, busier cores: a machine like a contributor's, not the one the gate was tuned on.

    python3 tools/slow_cores.py --hogs 1 -- bash .ci/heavy     # one core's worth taken by a busy loop
    python3 tools/slow_cores.py --quota 1.2 -- bash .ci/heavy  # the command and its children get 1.2 CPUs

``make test-heavy-slow`` runs the heavy step this way (SLOW_CORES picks the mode; default ``--hogs 1``). A
test that passes on the gate's machine and fails here asserts something the machine decides (a measured
figure compared exactly, a race on wall time, a threshold tuned on one machine): docs/development.md,
"Slower cores".

``--hogs N``: N processes at the command's own priority spinning for the whole run, so every worker and
compiler of the command shares the cores with them, as on a machine whose other tenants are busy. They
stop with the command, and by themselves if this process dies (each checks its parent).
``--quota CPUS``: a CPU cgroup (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``) that the command and everything
it starts run in: at most CPUS cores' time, however many cores it sees. Needs the right to create a
cgroup (root); the cgroup is removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

PERIOD_US = 100_000
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _spin(parent: int) -> None:
    """A busy loop that ends when ``parent`` is gone (its parent id changes)."""
    while os.getppid() == parent:
        for _ in range(200_000):
            pass


@contextlib.contextmanager
def hogs(count: int) -> Iterator[list[int]]:
    """``count`` busy processes for the duration of the block."""
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=_spin, args=(os.getpid(),), daemon=True) for _ in range(count)]
    for proc in procs:
        proc.start()
    try:
        yield [p.pid for p in procs if p.pid is not None]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.join(5)


def cpu_cgroup(name: str) -> tuple[Path, str, str]:
    """A new CPU cgroup's folder, its limit file and the limit's format ({quota} in microseconds a period)."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():  # v2: a child of this process's own cgroup
        own = Path("/proc/self/cgroup").read_text().splitlines()[0].split("::", 1)[-1].strip("/")
        return CGROUP_ROOT / own / name, "cpu.max", "{quota} " + str(PERIOD_US)
    return CGROUP_ROOT / "cpu" / name, "cpu.cfs_quota_us", "{quota}"


@contextlib.contextmanager
def quota(cpus: float) -> Iterator[Path]:
    """A CPU cgroup limited to ``cpus`` cores' time; its folder (write a pid to cgroup.procs to move it in)."""
    folder, limit, form = cpu_cgroup(f"wf-slow-cores-{os.getpid()}")
    try:
        folder.mkdir()
        if limit == "cpu.cfs_quota_us":
            (folder / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (folder / limit).write_text(form.format(quota=int(cpus * PERIOD_US)))
    except OSError as exc:
        raise SystemExit(f"slow_cores: --quota needs a CPU cgroup of its own at {folder}: {exc}") from exc
    try:
        yield folder
    finally:
        for _ in range(50):  # the command's processes have ended; the kernel takes a moment to let go
            with contextlib.suppress(OSError):
                folder.rmdir()
                break
            time.sleep(0.1)


def run(command: list[str], hog_count: int, cpus: float | None) -> int:
    with contextlib.ExitStack() as stack:
        prefix: list[str] = []
        if cpus is not None:
            folder = stack.enter_context(quota(cpus))
            prefix = ["sh", "-c", f'echo $$ > "{folder}/cgroup.procs" && exec "$@"', "sh"]
        pids = stack.enter_context(hogs(hog_count))
        said = f"{hog_count} busy loop(s) {pids}" + (f", {cpus:g} CPUs' quota" if cpus is not None else "")
        print(f"== slow_cores: {said}; {os.cpu_count()} cores; running: {' '.join(command)}", flush=True)
        started = time.monotonic()
        code = subprocess.call([*prefix, *command])
        print(f"== slow_cores: exit status {code} after {time.monotonic() - started:.0f} s ({said})", flush=True)
        return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hogs", type=int, default=0, help="busy processes beside the command (default 0)")
    parser.add_argument("--quota", type=float, default=None, help="CPUs' time the command may use (a cgroup)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command after --")
    if args.hogs < 0 or args.hogs > 64:
        parser.error(f"--hogs {args.hogs}: between 0 and 64")
    if args.quota is not None and not 0.05 <= args.quota <= 1024:
        parser.error(f"--quota {args.quota:g}: between 0.05 and 1024 CPUs")
    return run(command, args.hogs, args.quota)


if __name__ == "__main__":
    sys.exit(main())
