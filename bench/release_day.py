"""Release day, run (issue 64): from this checkout (no torch 2.15 row in the catalog, no CUDA 13.2 lock), a
corpus package subscribed on the embedded stack against today's PyPI; one watcher tick, then the run it starts,
to the published cu132 wheel of torch 2.15.0. Prints a table and writes bench/results/release_day-<UTC>.json.

    .venv/bin/python bench/release_day.py [--package torchsort --version 0.1.10] [--python 3.12] [--arch-list 9.0]

Upstream is what the stack reads by default: PyPI (torch's page, the package's, NVIDIA's CUDA projects) and
PyTorch's index, which a machine without it cannot read (the tick says so and goes on with PyPI alone: PyPI's own
torch 2.15.0 build is the CUDA 13.2 one, so that cell is known). The build hosts are this machine (the embedded
AWS plays EC2 and SSM with the real runner), with no CUDA toolkit of its own in sight: the compiler is the one
the watcher's lock installs. Figures: the tick's seconds and what it locked (key, sha256), the run's minutes to
the last published wheel (report.json's release_day: the tick that started it to the Report step, which runs
after publishing and signing), the manifest's device code per compiled file, the published bytes' test (the
test job installs what the channel holds into torch 2.15.0's environment), and the instances left (none).
A host whose pip configuration caps torch (a constraints file) caps the farm's environments on it too: there,
run it with ``PIP_CONSTRAINT=/dev/null``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def without_cuda() -> None:
    """What a host without a CUDA toolkit looks like to the builds: no nvcc on PATH, no CUDA_HOME."""
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not (Path(p) / "nvcc").exists()]
    os.environ["PATH"] = os.pathsep.join(path)
    for name in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "CUDACXX"):
        os.environ.pop(name, None)


def s3_json(s3: Any, bucket: str, key: str) -> Any:
    return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def keys(s3: Any, bucket: str, prefix: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def measure(args: argparse.Namespace, state_dir: Path) -> dict[str, Any]:
    from wheelfoundry_cli.main import main as wf

    from wheelfoundry_local.session import EmbeddedAws

    out: dict[str, Any] = {"package": args.package, "version": args.version, "python": args.python}
    with EmbeddedAws(state_dir=state_dir) as aws:
        stack = aws.deploy(ROOT / "template.yaml", parameters={"BuildHeartbeatSeconds": "120"})
        s3, sfn, bucket = aws.client("s3"), aws.client("stepfunctions"), stack.outputs["WheelBucketName"]
        fields = state_dir / "subscription.json"
        passed_on = {"options": {"executor": "ec2"}, "arch_list": args.arch_list, "torch_index": "pip"}
        fields.write_text(json.dumps(passed_on))
        argv = ["subscribe", "--subscription", str(fields), "--package", args.package, "--pypi", args.version,
                "--torch", ">=2.15", "--cuda", args.cuda, "--python", args.python, "--channel", "release-day",
                "--endpoint-url", aws.endpoint]  # fmt: skip
        if wf(argv) != 0:
            raise SystemExit("subscribe failed")
        started = time.monotonic()
        aws.events.fire_schedule(stack.schedule_name("WatchSchedule"))
        out["tick_seconds"] = round(time.monotonic() - started, 1)
        tick = s3_json(s3, bucket, "watch/last-tick.json")
        out["tick_problems"] = tick["problems"] + tick["subscriptions"].get(args.package, {}).get("problems", [])
        out["derived"] = [d["torch"] for d in tick["derived"]]
        named = ("cuda", "platform", "release", "key", "sha256")
        out["toolkits"] = [{k: t[k] for k in named} for t in tick["toolkits"]]
        runs = sfn.list_executions(stateMachineArn=stack.state_machine_arn)["executions"]
        out["runs_started"] = len(runs)
        if len(runs) != 1:
            out["result"] = f"the tick started {len(runs)} runs: {json.dumps(tick['runs'])[:2000]}"
            return out
        arn = runs[0]["executionArn"]
        result = aws.wait_execution(arn, timeout=args.timeout)
        out["run_seconds"] = round(time.monotonic() - started, 1)
        out["status"] = result.status
        run_id = arn.rsplit(":", 1)[1]
        report = s3_json(s3, bucket, f"runs/{run_id}/report.json")
        out["release_day"] = report.get("release_day")
        out["failed"] = [{k: f.get(k) for k in ("job_id", "error", "cause")} for f in report.get("failed") or []]
        staged = (report.get("merge") or {}).get("wheels") or []  # each published wheel and the cells it was tested in
        out["staged"] = [{k: w.get(k) for k in ("filename", "sha256", "cells", "variants")} for w in staged]
        for key in keys(s3, bucket, f"runs/{run_id}/jobs/"):
            if key.endswith("/manifest.json"):
                manifest = s3_json(s3, bucket, key)
                job = manifest["job_id"]
                if "-test-" in job:  # the published bytes, installed as a user gets them
                    fields = ("name", "version", "smoke", "cell")
                    out["tested"] = [{k: w.get(k) for k in fields} for w in manifest["wheels"]]
                else:
                    toolkit = (manifest.get("toolchain") or {}).get("cuda_toolkit") or {}
                    out["build"] = {
                        "job": job,
                        "toolkit_release": toolkit.get("release"),
                        "lock_sha256": toolkit.get("lock_sha256"),
                        "toolkit_lock": manifest.get("toolkit_lock"),
                        "nvcc": (manifest.get("toolchain") or {}).get("nvcc"),
                        "device_code": manifest.get("device_code"),
                    }
        out["published"] = [k for k in keys(s3, bucket, "wheels/release-day/") if k.endswith(".whl")]
        out["signed"] = [k for k in keys(s3, bucket, "wheels/release-day/") if k.endswith(".provenance.json")]
        aws.events.fire_schedule(stack.schedule_name("WatchSchedule"))
        out["second_tick_runs"] = len(sfn.list_executions(stateMachineArn=stack.state_machine_arn)["executions"]) - 1
        out["instances_left"] = len(aws.instances())
        out["result"] = "published" if out["published"] and result.status == "SUCCEEDED" else result.status
    return out


def table(found: dict[str, Any]) -> list[str]:
    day, build, staged = found.get("release_day") or {}, found.get("build") or {}, found.get("staged") or []
    rows = [
        ("package", f"{found['package']} {found['version']} (PyPI sdist), Python {found['python']}"),
        ("torch releases derived by the tick", ", ".join(found.get("derived") or []) or "-"),
        ("toolkit locked by the tick", "; ".join(f"CUDA {t['cuda']} {t['platform']} release {t['release']}, "
                                                 f"sha256 {t['sha256']}" for t in found.get("toolkits") or []) or "-"),
        ("tick", f"{found.get('tick_seconds')} s; problems: {len(found.get('tick_problems') or [])}"),
        ("runs started", str(found.get("runs_started"))),
        ("run status", str(found.get("status"))),
        ("tick to last published wheel", f"{day.get('minutes')} min" if day else "-"),
        ("build's toolkit", f"release {build.get('toolkit_release')}, lock sha256 {build.get('lock_sha256')}"),
        ("device code", json.dumps({c: {f: v.get("sass") for f, v in (r.get("files") or {}).items()}
                                    for c, r in (build.get("device_code") or {}).items()})),
        ("published bytes tested", json.dumps(found.get("tested"))),
        ("tested in", "; ".join(f"{w['filename']}: {', '.join(w.get('cells') or [])}" for w in staged)),
        ("published / signed", f"{len(found.get('published') or [])} / {len(found.get('signed') or [])}"),
        ("second tick started", str(found.get("second_tick_runs"))),
        ("instances left", str(found.get("instances_left"))),
        ("result", str(found.get("result"))),
        *((f"failed: {f['job_id']}", f"{f['error']}: {str(f['cause'])[:300]}") for f in found.get("failed") or []),
    ]  # fmt: skip
    width = max(len(k) for k, _ in rows)
    return [f"{k:<{width}}  {v}" for k, v in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", default="torchsort", help="a PyPI project (default: torchsort, of the corpus)")
    parser.add_argument("--version", default="0.1.10", help="its sdist's release on PyPI")
    parser.add_argument("--python", default="3.12")
    parser.add_argument("--cuda", default="13.2", help="the subscription's CUDA variants (default: PyPI's 13.2)")
    parser.add_argument("--arch-list", default="9.0", help="TORCH_CUDA_ARCH_LIST (default: Hopper only)")
    parser.add_argument("--timeout", type=float, default=5400, help="seconds to wait for the run")
    parser.add_argument("--state-dir", type=Path, help="keep the emulator's state here (default: a temporary folder)")
    args = parser.parse_args(argv)
    for name, value in (("POWERTOOLS_METRICS_DISABLED", "true"), ("POWERTOOLS_LOG_LEVEL", "WARNING")):
        os.environ.setdefault(name, value)
    without_cuda()
    if args.state_dir:  # kept: the instances' logs and work folders
        args.state_dir.mkdir(parents=True, exist_ok=True)
        found = measure(args, args.state_dir.resolve())
    else:
        with tempfile.TemporaryDirectory(prefix="wf-release-day-") as state:
            found = measure(args, Path(state))
    print("\n".join(table(found)))
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"release_day-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps({"machine": machine, **found}, indent=2) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")
    return 0 if found.get("result") == "published" and not found.get("instances_left") else 1


if __name__ == "__main__":
    sys.exit(main())
