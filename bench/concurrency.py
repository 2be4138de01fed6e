"""Many runs at once through the embedded AWS (issue 32): prints a table, writes bench/results/concurrency-*.json.

    .venv/bin/python bench/concurrency.py                 # 100 runs into one channel, then 100 into 10 channels
    .venv/bin/python bench/concurrency.py --runs 20 --scenario one

Each run is one job: the tiny C extension of tests/fixtures/tiny_ext with its own version (0.1.N), so
every run publishes a distinct wheel. The build is real (the runner, its stages, auditwheel, the smoke
test, in host mode) and fast: the source compiles in about a second and the compiler cache (sccache
in WF_CACHE_DIR) serves every rebuild after the first, since only the version string differs; the
torch environment is the shared cached one. So what is measured is the orchestration.

The account's spot standard vCPU quota (L-34B43A08) is set to ``--quota`` vCPUs (default 160: ten
16-vCPU hosts at once), so runs past that wait their turn at Launch (VcpuQuotaWait) exactly as on a
new AWS account; it also keeps this 2-core machine from starting 100 builds at once.

Scenarios: "one": every run into one channel (the lost-update case for the index); "several": runs
spread over 10 channels, one of them the nightly preset's channel ("nightly") and all on spot like the
preset. The nightly preset itself (PyTorch from source, 3 jobs) cannot build here; its market and
channel are what this reproduces.

Checks per scenario: every run reached a final state; every version is in its channel's index
(no lost update); parent history events per run (flat: the same for every run); Lambda throttling
errors (Lambda.TooManyRequestsException reaching a state); instances and builds left.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FINAL = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")


def _sources(aws: Any, bucket: str, state: Path, count: int) -> list[str]:
    from wheelfoundry_local.demo import pack_source

    uris = []
    for n in range(count):
        folder = state / f"src-{n}"
        shutil.copytree(ROOT / "tests" / "fixtures" / "tiny_ext", folder)
        setup = folder / "setup.py"
        setup.write_text(setup.read_text().replace('version="0.1.0"', f'version="0.1.{n}"'))
        key = f"sources/bench-tiny-{n}.tar.gz"
        aws.client("s3").put_object(Bucket=bucket, Key=key, Body=pack_source(folder, "wf-tiny-ext"))
        uris.append(f"s3://{bucket}/{key}")
    return uris


def _request(uri: str, channel: str) -> dict[str, Any]:
    """The workflow tests' one-job request (tests/workflow/conftest.py), on spot like the nightly preset."""
    from tests.workflow.conftest import extension_request

    return extension_request(uri, channel=channel, options={"executor": "ec2", "spot": True})


def _indexed(aws: Any, bucket: str, channel: str) -> set[str]:
    try:
        body = aws.client("s3").get_object(Bucket=bucket, Key=f"simple/{channel}/wf-tiny-ext/index.html")["Body"]
    except Exception:
        return set()
    return set(re.findall(r"wf_tiny_ext-(0\.1\.\d+)[+-]", body.read().decode()))


def _logical(function_name: str) -> str:
    """wheelfoundry-LaunchFunction-ABC123 -> LaunchFunction."""
    return function_name.split("-")[1] if "-" in function_name else function_name


def scenario(aws: Any, stack: Any, state: Path, name: str, runs: int, channels: list[str]) -> dict[str, Any]:
    bucket = stack.outputs["WheelBucketName"]
    uris = _sources(aws, bucket, state / name, runs)
    aws.invocations.clear()
    refused_before = aws.quotas.refused
    sfn = aws.client("stepfunctions")
    started = time.monotonic()
    arns = {}
    for n, uri in enumerate(uris):
        run = f"{name}-{n:03d}"
        arns[run] = aws.start_execution(stack.state_machine_arn, _request(uri, channels[n % len(channels)]), name=run)
    statuses: dict[str, str] = {}
    deadline = started + 3600
    while len(statuses) < runs and time.monotonic() < deadline:
        for run, arn in arns.items():
            if run not in statuses:
                status = sfn.describe_execution(executionArn=arn)["status"]
                if status in FINAL:
                    statuses[run] = status
        time.sleep(1.0)
    wall = time.monotonic() - started
    events = [len(aws.history(arn)) for arn in arns.values()]
    expected: dict[str, set[str]] = {}
    for n in range(runs):
        expected.setdefault(channels[n % len(channels)], set()).add(f"0.1.{n}")
    missing = sum(len(want - _indexed(aws, bucket, channel)) for channel, want in expected.items())
    calls = aws.invocations.all()
    throttled = [c for c in calls if c.error_type and ("TooManyRequests" in c.error_type or "Throttl" in c.error_type)]
    waits = [c for c in calls if c.error_type == "VcpuQuotaWait"]
    # which handlers ran past their Lambda timeout (Sandbox.Timedout), by function (the stack's logical name)
    timeouts = Counter(_logical(c.function_name) for c in calls if c.error_type and "Timedout" in c.error_type)
    failures = {r: s for r, s in statuses.items() if s != "SUCCEEDED"}
    causes = {}
    for run in list(failures)[:5]:
        described = sfn.describe_execution(executionArn=arns[run])
        causes[run] = f"{described.get('error')}: {(described.get('cause') or '')[:300]}"
    return {
        "scenario": name,
        "runs": runs,
        "channels": len(channels),
        "final": len(statuses),
        "succeeded": sum(1 for s in statuses.values() if s == "SUCCEEDED"),
        "failed": len(failures) + (runs - len(statuses)),
        "wall_s": round(wall, 1),
        "events_per_run": f"{min(events)}/{statistics.median(events):g}/{max(events)}",
        "missing_in_index": missing,
        "throttled": len(throttled),
        "quota_waits": len(waits),
        "quota_refusals": aws.quotas.refused - refused_before,
        "lambda_calls": len(calls),
        "instances_left": len(aws.instances()),
        "builds_left": len(aws.builds_in_progress()),
        "lambda_timeouts": dict(timeouts),
        "failure_causes": causes,
    }


def code_digest() -> str:
    """What the embedded AWS imports and deploys (handlers, runner, emulator, template, ASL): an edit under a
    running bench mixes old and new modules in one process, which voids its figures."""
    digest = hashlib.sha256()
    for folder in ("functions", "buildspecs", "local", "statemachine"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    digest.update((ROOT / "template.yaml").read_bytes())
    return digest.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--scenario", choices=("one", "several", "both"), default="both")
    parser.add_argument("--quota", type=int, default=160, help="the spot standard vCPU quota (L-34B43A08)")
    parser.add_argument(
        "--heartbeat", type=int, default=60, help="the stack's BuildHeartbeatSeconds (`local up` and the demo use 120)"
    )
    args = parser.parse_args()
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
    from wheelfoundry_local import EmbeddedAws

    load = os.getloadavg()
    code = code_digest()
    rows = []
    state = Path(tempfile.mkdtemp(prefix="wf-bench-conc-"))
    try:
        with EmbeddedAws(state_dir=state, registration_delay=0.0) as aws:
            stack = aws.deploy(
                ROOT / "template.yaml", {"BuildHeartbeatSeconds": str(args.heartbeat), "MaxConcurrentJobs": "10"}
            )
            aws.quotas.set("L-34B43A08", args.quota)
            several = ["nightly", *(f"bench-ch{n}" for n in range(1, 10))]
            if args.scenario in ("one", "both"):
                rows.append(scenario(aws, stack, state, "one", args.runs, ["bench-one"]))
            if args.scenario in ("several", "both"):
                rows.append(scenario(aws, stack, state, "several", args.runs, several))
    finally:
        shutil.rmtree(state, ignore_errors=True)
    keys = ["scenario", "runs", "channels", "succeeded", "failed", "wall_s", "events_per_run", "missing_in_index"]
    keys += ["throttled", "quota_waits", "lambda_calls", "instances_left", "builds_left"]
    widths = {k: max(len(k), *(len(str(r.get(k, ""))) for r in rows)) for k in keys}
    print("  ".join(k.ljust(widths[k]) for k in keys))
    for row in rows:
        print("  ".join(str(row.get(k, "")).ljust(widths[k]) for k in keys))
    for row in rows:
        if row["lambda_timeouts"]:
            print(f"  {row['scenario']}: Lambda timeouts by function: {row['lambda_timeouts']}")
        for run, cause in row["failure_causes"].items():
            print(f"  {run}: {cause}")
    print(
        f"(events_per_run: min/median/max of the parent history; quota {args.quota} vCPUs = "
        f"{args.quota // 16} hosts at once; build heartbeat {args.heartbeat} s; "
        f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})"
    )
    if code != code_digest():
        print("\nVOID: the source tree changed during the run (the handlers import from it); no result written")
        return 2
    out = ROOT / "bench" / "results" / f"concurrency-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    machine = {"python": sys.version.split()[0], "cpus": os.cpu_count(), "loadavg_before": load}
    out.write_text(
        json.dumps(
            {"machine": machine, "quota_vcpus": args.quota, "heartbeat_s": args.heartbeat, "rows": rows}, indent=2
        )
    )
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 0 if all(r["failed"] == 0 and r["missing_in_index"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
