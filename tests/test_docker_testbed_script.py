"""tools/docker_testbed.py runs under the machine's own python3 (`make docker-stop`, .ci/heavy's exit trap):
at import it needs nothing but the standard library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_test_bed_script_loads_without_the_projects_packages() -> None:
    # -S -I: no site-packages (so no editable install of wfbuild) and no PYTHONPATH, as a bare python3 has.
    argv = [sys.executable, "-S", "-I", str(ROOT / "tools" / "docker_testbed.py"), "--help"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "{start,stop,status,images}" in done.stdout
