"""The container path's cost: one extension job in Docker vs the same job on the host.

    .venv/bin/python bench/container_mode.py [--runs 2] [--source tests/fixtures/tiny_ext --name wf-tiny-ext]

Needs the Docker test bed (`make docker`). One embedded AWS, the shipped template and state machine,
one extension job (CPU, torch 2.13, Python 3.11) on the EC2 path. Each mode runs once to warm up
(host mode fills the build-env cache; container mode finds its builder image), then ``--runs`` times
measured: the execution's wall time (start-execution to its end) and each stage's seconds from the
job's manifest.json. Container mode is WF_CONTAINER=docker with the test bed's builder image
(WF_BUILDER_IMAGE); host mode is WF_CONTAINER=none. Prints a table, writes
bench/results/container_mode-<time>.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def testbed() -> Any:
    spec = importlib.util.spec_from_file_location("docker_testbed", ROOT / "tools" / "docker_testbed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(aws: Any, stack: Any, request: dict[str, Any], mode: str) -> dict[str, Any]:
    from wheelfoundry_local.demo import run_request
    from wheelfoundry_local.progress import Progress

    os.environ["WF_LOCAL_CONTAINER"] = mode
    started = time.monotonic()
    result = run_request(aws, stack, request, lambda _line: None, Progress(), 1800)
    wall = time.monotonic() - started
    if not result.succeeded:
        raise SystemExit(f"{mode} run failed: {result.error}: {result.cause}")
    run_id = result.output["run_id"]
    (job,) = [k for k in list_keys(aws, stack, f"runs/{run_id}/jobs/") if k.endswith("/manifest.json")]
    body = aws.client("s3").get_object(Bucket=stack.outputs["WheelBucketName"], Key=job)["Body"].read()
    stages = {s["name"].split("-torch")[0]: s["seconds"] for s in json.loads(body)["stages"]}
    return {"mode": mode, "wall_seconds": round(wall, 1), "stages": stages}


def list_keys(aws: Any, stack: Any, prefix: str) -> list[str]:
    listing = aws.client("s3").list_objects_v2(Bucket=stack.outputs["WheelBucketName"], Prefix=prefix)
    return [o["Key"] for o in listing.get("Contents", [])]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--source", type=Path, default=ROOT / "tests" / "fixtures" / "tiny_ext")
    parser.add_argument("--name", default="wf-tiny-ext")
    args = parser.parse_args()
    bed = testbed()
    problem = bed.engine_problem()
    if problem:
        print(f"no Docker test bed: {problem} (make docker)", file=sys.stderr)
        return 1
    os.environ |= {"WF_BUILDER_IMAGE": bed.build_builder(), "DOCKER_HOST": bed.docker_host()}
    for name in ("POWERTOOLS_METRICS_DISABLED", "POWERTOOLS_TRACE_DISABLED"):
        os.environ.setdefault(name, "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    from wheelfoundry_local import EmbeddedAws
    from wheelfoundry_local.demo import upload_source

    request: dict[str, Any] = {
        "framework": "extension", "name": args.name, "torch": ["2.13"], "cuda": ["cpu"], "python": ["3.11"],
        "torch_index": "pip", "channel": "bench", "options": {"executor": "ec2", "spot": False},
    }  # fmt: skip
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, EmbeddedAws(state_dir=tmp, registration_delay=0.0) as aws:
        os.environ["WF_CACHE_DIR"] = str(Path(tmp) / "cache")
        stack = aws.deploy(ROOT / "template.yaml", parameters={"BuildHeartbeatSeconds": "120"})
        request["source"] = {"s3": upload_source(aws, stack, args.source, args.name)}
        for mode in ("none", "docker"):
            warm = measure(aws, stack, request, mode)
            print(f"warm-up {mode}: {warm['wall_seconds']}s", file=sys.stderr)
            rows += [measure(aws, stack, request, mode) for _ in range(args.runs)]
    names = list(dict.fromkeys(n for r in rows for n in r["stages"]))
    print(f"{'mode':<8} {'wall s':>7} " + " ".join(f"{n[:12]:>12}" for n in names))
    summary = {}
    for mode in ("none", "docker"):
        mine = [r for r in rows if r["mode"] == mode]
        median = {n: statistics.median(r["stages"].get(n, 0.0) for r in mine) for n in names}
        wall = statistics.median(r["wall_seconds"] for r in mine)
        summary[mode] = {"wall_seconds": wall, "stages": median}
        label = "host" if mode == "none" else "docker"
        print(f"{label:<8} {wall:>7.1f} " + " ".join(f"{median[n]:>12.1f}" for n in names))
    extra = summary["docker"]["wall_seconds"] - summary["none"]["wall_seconds"]
    print(f"container mode costs {extra:+.1f}s per job (median of {args.runs} runs each, after a warm-up)")
    engine = {"docker": bed.server_version(), "storage": bed.docker("info", "--format", "{{.Driver}}", quiet=True)}
    engine["storage"] = engine["storage"].stdout.strip()
    out = ROOT / "bench" / "results" / f"container_mode-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    data = {"request": request, "engine": engine, "cores": os.cpu_count(), "rows": rows, "median": summary}
    out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
