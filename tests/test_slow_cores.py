"""tools/slow_cores.py (``make test-heavy-slow``): the command runs beside busy loops, or inside a CPU cgroup
of the asked quota; its exit status is the tool's; nothing it started outlives it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT

TOOL = ROOT / "tools" / "slow_cores.py"


def test_busy_loops_run_beside_the_command_and_end_with_it(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    # the command records its siblings (the tool's other children) and their state, then fails with 3
    script = (
        "import os, pathlib, sys; me = os.getpid(); parent = os.getppid(); "
        "kids = [p for p in pathlib.Path('/proc').glob('[0-9]*/stat') if p.read_text().split(') ')[1].split()[1] "
        "== str(parent) and int(p.parent.name) != me]; "
        "states = [p.read_text().split(') ')[1].split()[0] for p in kids]; "
        f"pathlib.Path({str(seen)!r}).write_text(' '.join(p.parent.name for p in kids) + '|' + ' '.join(states)); "
        "sys.exit(3)"
    )
    proc = subprocess.run([sys.executable, str(TOOL), "--hogs", "2", "--", sys.executable, "-c", script],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    pids, states = seen.read_text().split("|")
    hogs = [int(p) for p in pids.split()]
    assert len(hogs) == 2 and set(states.split()) <= {"R", "S"}, (pids, states)
    assert "2 busy loop(s)" in proc.stdout and "exit status 3" in proc.stdout
    for pid in hogs:  # gone, not left spinning
        assert not Path(f"/proc/{pid}/stat").exists() or " Z " in Path(f"/proc/{pid}/stat").read_text()


def test_a_quota_runs_the_command_in_a_cpu_cgroup_of_that_many_cpus(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    script = (
        "import pathlib; lines = pathlib.Path('/proc/self/cgroup').read_text().splitlines(); "
        "mine = [l.split(':', 2)[2] for l in lines if 'wf-slow-cores-' in l]; "
        "root = pathlib.Path('/sys/fs/cgroup'); "
        "v2 = root / mine[0].lstrip('/') / 'cpu.max' if mine else None; "
        "v1 = root / 'cpu' / mine[0].lstrip('/') / 'cpu.cfs_quota_us' if mine else None; "
        "limit = v2 if v2 and v2.exists() else v1; "
        f"pathlib.Path({str(seen)!r}).write_text(limit.read_text().split()[0] if limit else 'none')"
    )
    proc = subprocess.run([sys.executable, str(TOOL), "--quota", "0.5", "--", sys.executable, "-c", script],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert seen.read_text() == "50000", "half of each 100 ms period: 0.5 CPUs"
    assert not list(Path("/sys/fs/cgroup").glob("**/wf-slow-cores-*")), "the cgroup is removed"


def test_bad_arguments_are_refused_naming_the_value() -> None:
    proc = subprocess.run([sys.executable, str(TOOL), "--quota", "0", "--", "true"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--quota 0: between 0.05 and 1024 CPUs" in proc.stderr
    proc = subprocess.run([sys.executable, str(TOOL), "--hogs", "1"], capture_output=True, text=True)
    assert proc.returncode == 2 and "a command after --" in proc.stderr
