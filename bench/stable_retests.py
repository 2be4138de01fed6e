"""One stable wheel, three torch releases: built once, then served on two later releases by retests, no build.

    .venv/bin/python bench/stable_retests.py [--state-dir DIR]

On the embedded stack (the shipped template): tests/fixtures/stable_ext (CPU op on torch::stable) is built once
for torch 2.13 (``abi: stable``, Python 3.11) and published. A subscription for torch >=2.13,<2.16 then meets the
recorded upstream (tests/fixtures/watch: PyPI's torch pages with 2.14.1 and 2.15.0, served on 127.0.0.1): one
tick starts a retest per new release (no build job). Each test job installs the published bytes into that torch's
environment, torch from PyPI (2.15.0's facts derived from its wheels, as the watcher does for a release the
catalog lacks), and runs the package's test there. It prints a table and writes bench/results/stable_retests-<UTC>.json:
per run its kind (build or retest), jobs, minutes, the cells tested; the published wheel's sha256 and variants.
A host whose pip configuration caps torch (a constraints file) caps the farm's environments on it too:
there, run it with ``PIP_CONSTRAINT=/dev/null``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
sys.path[:0] = [str(ROOT), str(ROOT / "local"), str(ROOT / "cli"), str(ROOT / "functions")]


def s3_json(s3: Any, bucket: str, key: str) -> Any:
    return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def keys(s3: Any, bucket: str, prefix: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def run_record(s3: Any, bucket: str, run_id: str, seconds: float, status: str) -> dict[str, Any]:
    jobs = sorted({k.split("/")[3] for k in keys(s3, bucket, f"runs/{run_id}/jobs/")})
    tested: list[str] = []
    for job in [j for j in jobs if "-test-" in j]:
        manifest = s3_json(s3, bucket, f"runs/{run_id}/jobs/{job}/manifest.json")
        tested += [c for w in manifest.get("wheels") or [] for c in w.get("tested_cells") or []]
    request = s3_json(s3, bucket, f"runs/{run_id}/request.json")
    kind = "retest" if request.get("retest") else "build"
    return {"run": run_id, "kind": kind, "status": status, "jobs": jobs, "minutes": round(seconds / 60, 1),
            "torch": request.get("torch"), "tested_cells": tested}  # fmt: skip


def measure(state: Path) -> dict[str, Any]:
    from wheelfoundry_cli.main import main as wf

    from tests.workflow.conftest import served
    from wheelfoundry_local.demo import pack_source
    from wheelfoundry_local.session import EmbeddedAws

    upstream = state / "upstream"
    shutil.copytree(ROOT / "tests" / "fixtures" / "watch", upstream)
    out: dict[str, Any] = {"runs": []}
    with served(upstream) as url, EmbeddedAws(state_dir=state / "aws") as aws:
        parameters = {
            "UpstreamPypiUrl": f"{url}/pypi.org/",
            "UpstreamPytorchIndexUrl": f"{url}/download.pytorch.org/whl/",
        }
        stack = aws.deploy(ROOT / "template.yaml", parameters)
        s3, sfn, bucket = aws.client("s3"), aws.client("stepfunctions"), stack.outputs["WheelBucketName"]
        source = "sources/wf-stable-0.1.0.tar.gz"
        s3.put_object(
            Bucket=bucket, Key=source, Body=pack_source(ROOT / "tests" / "fixtures" / "stable_ext", "wf-stable")
        )
        first = {"framework": "extension", "name": "wf-stable", "source": {"s3": f"s3://{bucket}/{source}"},
                 "torch": ["2.13"], "cuda": ["cpu"], "python": ["3.11"], "torch_index": "pip", "channel": "ci",
                 "abi": "stable", "options": {"executor": "ec2"}}  # fmt: skip
        started = time.monotonic()
        result = aws.wait_execution(aws.start_execution(stack.state_machine_arn, first), timeout=3600)
        run_id = result.arn.rsplit(":", 1)[1]
        out["runs"].append(run_record(s3, bucket, run_id, time.monotonic() - started, result.status))
        fields = state / "subscription.json"
        passed_on = {"abi": "stable", "torch_index": "pip", "options": {"executor": "ec2"}}
        fields.write_text(json.dumps({"source": {"s3": f"s3://{bucket}/{source}"}, **passed_on}))
        argv = ["subscribe", "--subscription", str(fields), "--package", "wf-stable", "--torch", ">=2.13,<2.16",
                "--cuda", "cpu", "--python", "3.11", "--channel", "ci", "--endpoint-url", aws.endpoint]  # fmt: skip
        if wf(argv) != 0:
            raise SystemExit("subscribe failed")
        ticked = time.monotonic()
        aws.events.fire_schedule(stack.schedule_name("WatchSchedule"))
        tick = s3_json(s3, bucket, "watch/last-tick.json")
        out["tick"] = [{k: r.get(k) for k in ("name", "reason", "status", "jobs", "tests")} for r in tick["runs"]]
        for planned in tick["runs"]:
            arn = stack.state_machine_arn.replace(":stateMachine:", ":execution:") + f":{planned['name']}"
            result = aws.wait_execution(arn, timeout=3600)
            out["runs"].append(run_record(s3, bucket, planned["name"], time.monotonic() - ticked, result.status))
        (key,) = [k for k in keys(s3, bucket, "wheels/ci/wf-stable/") if k.endswith(".whl")]
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        state = s3_json(s3, bucket, "simple/ci/.index-state.json")["wheels"][key]
        out["wheel"] = {"name": key.rsplit("/", 1)[1], "sha256": hashlib.sha256(body).hexdigest(),
                        "variants": state["variants"],
                        "test_results": [k.rsplit("/", 1)[1] for k in keys(s3, bucket, f"{key}.tests/")]}  # fmt: skip
        aws.events.fire_schedule(stack.schedule_name("WatchSchedule"))
        out["second_tick_runs"] = len(s3_json(s3, bucket, "watch/last-tick.json")["runs"])
        out["executions"] = len(sfn.list_executions(stateMachineArn=stack.state_machine_arn)["executions"])
        out["instances_left"] = len(aws.instances())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", type=Path, help="keep the emulator's state here (default: a temporary folder)")
    args = parser.parse_args(argv)
    for name, value in (("POWERTOOLS_METRICS_DISABLED", "true"), ("POWERTOOLS_LOG_LEVEL", "WARNING")):
        os.environ.setdefault(name, value)
    with tempfile.TemporaryDirectory(prefix="wf-stable-retests-") as tmp:
        found = measure((args.state_dir or Path(tmp)).resolve())
    for run in found["runs"]:
        print(f"{run['kind']:<7} torch {','.join(run['torch'] or []):<8} {run['status']:<10} {run['minutes']:>5} min  "
              f"jobs {', '.join(run['jobs'])}; tested {', '.join(run['tested_cells'])}")  # fmt: skip
    print(
        f"published {found['wheel']['name']} sha256 {found['wheel']['sha256'][:16]}…; variants "
        f"{', '.join(found['wheel']['variants'])}; second tick runs {found['second_tick_runs']}"
    )
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"stable_retests-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps({"machine": machine, **found}, indent=2) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")
    ok = all(r["status"] == "SUCCEEDED" for r in found["runs"]) and len(found["wheel"]["variants"]) >= 3
    return 0 if ok and not found["instances_left"] else 1


if __name__ == "__main__":
    sys.exit(main())
