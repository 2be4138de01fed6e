"""WheelFoundry benchmarks: prints a table and writes bench/results/bench-<timestamp>.json.

    .venv/bin/python bench/bench.py            # everything (about 3 minutes on 2 cores)
    .venv/bin/python bench/bench.py --quick    # planning and index only

What it measures, and why it matters:
- planning: validate + plan a request (the Validate Lambda's work) for growing matrices;
- history: events in the parent execution's history for 1..N jobs (the 25,000-event cap), and
  whether a build's duration adds events (it must not: heartbeats add none);
- index: publishing a channel's PEP 503 index for N wheels in the emulated S3.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _timed(fn: Any, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def bench_planning() -> list[dict[str, Any]]:
    from wheelfoundry.catalog.catalog import load_catalog
    from wheelfoundry.config import load_config
    from wheelfoundry.planning.planning import plan_request
    from wheelfoundry.request.request import parse_request

    catalog, config = load_catalog(), load_config().with_guardrails(max_jobs=100, max_instance_hours=10_000)
    rows = []
    for torch in (["2.13"], ["2.9", "2.10", "2.11", "2.12", "2.13", "2.14"]):
        for cuda in (["cpu"], ["cpu", "12.6", "13.0"]):
            raw = {
                "framework": "extension",
                "name": "ext",
                "source": {"git": "https://example.com/e.git"},
                "torch": torch,
                "cuda": cuda,
                "python": ["3.11", "3.12"],
                "platforms": ["x86_64"],
            }
            if "2.9" in torch and "13.0" in cuda:
                raw["cuda"] = ["cpu", "12.6"]
            jobs = len(plan_request(parse_request(raw, catalog, config), catalog, config).jobs)
            seconds = _timed(lambda r=raw: plan_request(parse_request(r, catalog, config), catalog, config), 20)
            rows.append({"bench": "plan", "case": f"{jobs} jobs", "jobs": jobs, "ms": round(seconds * 1000, 2)})
    return rows


def bench_index(counts: tuple[int, ...] = (20, 100)) -> list[dict[str, Any]]:
    import boto3
    from moto import mock_aws

    from wheelfoundry.publishing.index import publish_index

    rows = []
    for count in counts:
        with mock_aws():
            s3 = boto3.client("s3", region_name="us-east-1")
            s3.create_bucket(Bucket="bench-bucket")
            for n in range(count):
                body = f"wheel {n}".encode()
                key = f"wheels/bench/pkg{n % 10}/pkg{n % 10}-1.{n}-cp311-cp311-manylinux_2_28_x86_64.whl"
                sha = hashlib.sha256(body).hexdigest()
                s3.put_object(Bucket="bench-bucket", Key=key, Body=body, Metadata={"sha256": sha})
            seconds = _timed(lambda s=s3: publish_index(s, "bench-bucket", "bench"), 3)
        rows.append({"bench": "index", "case": f"{count} wheels", "wheels": count, "ms": round(seconds * 1000, 1)})
    return rows


def bench_history(job_counts: tuple[int, ...] = (1, 2, 4)) -> list[dict[str, Any]]:
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
    from wheelfoundry_local import EmbeddedAws
    from wheelfoundry_local.demo import pack_source

    rows = []
    state = Path(tempfile.mkdtemp(prefix="wf-bench-"))
    try:
        with EmbeddedAws(state_dir=state, registration_delay=0.0) as aws:
            stack = aws.deploy(ROOT / "template.yaml", {"BuildHeartbeatSeconds": "30", "MaxConcurrentJobs": "10"})
            sfn = aws.client("stepfunctions")
            for executor, first_state in (("ec2", "LaunchFunction"), ("codebuild", "StartBuildFunction")):
                for count in job_counts:  # jobs stopped at their first state: what the parent history costs per job
                    aws.faults.inject(first_state, "LaunchFailed", times=count)
                    # One job per CUDA toolkit (cells of one toolkit are packed into one job).
                    request = {
                        "framework": "extension",
                        "name": "ext",
                        "source": {"git": "https://example.com/e.git"},
                        "torch": ["2.14"],
                        "cuda": ["cpu", "12.6", "13.0", "13.2"][:count],
                        "python": ["3.11"],
                        "options": {"executor": executor},
                    }
                    arn = aws.start_execution(stack.state_machine_arn, request)
                    aws.wait_execution(arn, timeout=120)
                    events = len(aws.history(arn))
                    rows.append(
                        {
                            "bench": "history",
                            "case": f"{count} {executor} jobs (stopped at start)",
                            "jobs": count,
                            "parent_events": events,
                        }
                    )
            bucket = stack.outputs["WheelBucketName"]
            source = ROOT / "tests" / "fixtures" / "tiny_ext"
            cases = [("ec2", 0, False), ("ec2", 20, False), ("codebuild", 0, False), ("codebuild", 20, False)]
            cases += [("ec2", 0, True), ("ec2", 20, True)]  # + the GPU test step (played by the local agent)
            for executor, sleep, gpu in cases:
                # One real build, short and long, on each executor: the parent history must not grow.
                folder = state / f"src-{executor}-{sleep}-{gpu}"
                shutil.copytree(source, folder)
                setup = folder / "setup.py"
                setup.write_text(f"import time\ntime.sleep({sleep})\n" + setup.read_text())
                key = f"sources/tiny-{executor}-{sleep}-{gpu}.tar.gz"
                aws.client("s3").put_object(Bucket=bucket, Key=key, Body=pack_source(folder, "wf-tiny-ext"))
                request = {
                    "framework": "extension",
                    "name": "wf-tiny-ext",
                    "source": {"s3": f"s3://{bucket}/{key}"},
                    "torch": ["2.14"] if gpu else ["2.13"],
                    "cuda": ["13.0"] if gpu else ["cpu"],
                    "python": ["3.11"],
                    "torch_index": "pip",
                    "channel": f"bench-{executor}-{sleep}-{'gpu' if gpu else 'nogpu'}",
                    "options": {"executor": executor, **({"gpu_test": True} if gpu else {})},
                }  # one channel each: a rebuild never overwrites a wheel
                started = time.monotonic()
                arn = aws.start_execution(stack.state_machine_arn, request)
                result = aws.wait_execution(arn, timeout=900)
                rows.append(
                    {
                        "bench": "history",
                        "case": f"1 real {executor} build{' + GPU test' if gpu else ''}, +{sleep}s",
                        "jobs": 1,
                        "status": result.status
                        if result.succeeded
                        else f"{result.status}: {(result.cause or '')[:300]}",
                        "parent_events": len(aws.history(arn)),
                        "lambda_calls": len(aws.invocations.all()),
                        "wall_s": round(time.monotonic() - started, 1),
                    }
                )
                aws.invocations.clear()
            del sfn
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rows = bench_planning() + bench_index()
    if not args.quick:
        rows += bench_history()
    keys = ["bench", "case", "ms", "parent_events", "lambda_calls", "status", "wall_s"]
    widths = {k: max(len(k), *(len(str(r.get(k, ""))) for r in rows)) for k in keys}
    print("  ".join(k.ljust(widths[k]) for k in keys))
    for row in rows:
        print("  ".join(str(row.get(k, "")).ljust(widths[k]) for k in keys))
    out = ROOT / "bench" / "results" / f"bench-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    machine = {"python": sys.version.split()[0], "cpus": os.cpu_count(), "platform": sys.platform}
    out.write_text(json.dumps({"machine": machine, "rows": rows}, indent=2))
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
