"""How long `wheelfoundry plan` takes, as a user runs it (a new process each time).

    .venv/bin/python bench/plan_time.py [--runs 10]

Prints a table (request, runs, best, median, worst in ms; first a bare interpreter start, `python -c pass`)
and writes bench/results/plan_time-<UTC>.json. The goal: `plan` of a one-job request answers within 300 ms
of a bare interpreter start (median minus median); exit 1 when it does not. The command imports neither the
embedded AWS nor boto3 for `plan`, and reads only the toolkit locks its jobs use.

Two environments: the user's, a venv with what `pip install 'wheelfoundry[cli]'` installs (made once under
.tools/plan-user-venv, at the Lambda lock's versions), which the goal is judged in; and this repository's
development venv, shown beside it. The development venv also holds jsonschema's optional format checkers
(idna, rfc3339-validator, ... pulled in by the test tooling), which `import jsonschema` loads eagerly.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_MS = 300
REQUESTS = {
    "one extension job (extension-demo.json)": "examples/requests/extension-demo.json",
    "three framework jobs (torch-2.5.1-three-targets.json)": "examples/requests/torch-2.5.1-three-targets.json",
    "nightly preset": "nightly",
}


USER_VENV = ROOT / ".tools" / "plan-user-venv"


def user_venv() -> Path:
    """A venv with the CLI as a user installs it (non-editable), made once; its python."""
    python = USER_VENV / "bin" / "python"
    stamp = USER_VENV / ".installed"
    if not stamp.is_file() or stamp.read_text() != _fingerprint():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(USER_VENV)], check=True)
        constraints = USER_VENV / "constraints.txt"
        lock = (ROOT / "functions" / "requirements.txt").read_text().splitlines()
        constraints.write_text("\n".join(line.split()[0] for line in lock if "==" in line.split(" ")[0]) + "\n")
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", str(constraints)]
        subprocess.run([*pip, f"{ROOT}[cli]"], check=True)
        stamp.write_text(_fingerprint())
    return python


def _fingerprint() -> str:
    """What the user venv was made from: the project's code and dependencies (remade when they change)."""
    import hashlib

    digest = hashlib.sha256()
    for folder in ("functions/wheelfoundry", "cli"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(path.read_bytes())
    digest.update((ROOT / "pyproject.toml").read_bytes())
    return digest.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    python = user_venv()
    exe = str(python.with_name("wheelfoundry"))
    dev = os.path.join(os.path.dirname(sys.executable), "wheelfoundry")
    rows = []
    commands = {"bare interpreter (python -c pass)": [str(python), "-c", "pass"]}
    commands |= {label: [exe, "plan", request] for label, request in REQUESTS.items()}
    commands |= {f"dev venv: {label}": [dev, "plan", request] for label, request in REQUESTS.items()}
    for label, argv in commands.items():
        times = []
        for _ in range(args.runs):
            started = time.perf_counter()
            subprocess.run(argv, cwd=ROOT, capture_output=True, check=True)
            times.append((time.perf_counter() - started) * 1000)
        rows.append({"request": label, "runs": args.runs, "best_ms": min(times), "median_ms": statistics.median(times),
                     "worst_ms": max(times)})  # fmt: skip
    print(f"{'request':58} {'runs':>4} {'best':>7} {'median':>7} {'worst':>7}")
    for r in rows:
        print(
            f"{r['request']:58} {r['runs']:>4} {r['best_ms']:>5.0f}ms {r['median_ms']:>5.0f}ms {r['worst_ms']:>5.0f}ms"
        )
    over = rows[1]["median_ms"] - rows[0]["median_ms"]  # the one-job request past a bare start
    verdict = {"goal_ms_over_bare": GOAL_MS, "one_job_ms_over_bare": round(over, 1), "within_goal": over <= GOAL_MS}
    out = ROOT / "bench" / "results" / f"plan_time-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    body = {"cpus": os.cpu_count(), "load": os.getloadavg(), **verdict, "rows": rows}
    out.write_text(json.dumps(body, indent=1) + "\n")
    print(f"one-job plan: {over:.0f} ms over a bare start (goal {GOAL_MS} ms); wrote {out.relative_to(ROOT)}")
    return 0 if verdict["within_goal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
