"""Issue 10: a hostile extension build, run through the shipped state machine in the embedded AWS, tries to
write into another run's outputs and the framework compiler cache, read another job's contract and call
back; its job session (buildspecs/wfbuild/runner/credentials.py), enforced by the embedded S3 with the deployed
template's roles (local/wheelfoundry_local/iam_enforce.py), refuses all of it, and the run publishes only
its own verified wheel."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from tests.workflow.conftest import extension_request, run, s3_keys, source, upload
from wheelfoundry_local import DeployedStack, EmbeddedAws

TINY_SETUP = (Path(__file__).parents[1] / "fixtures/tiny_ext/setup.py").read_text()
VICTIM = "runs/victim-run/jobs/victim-cpu-x86_64/wheels/victim-1.0-py3-none-any.whl"
# What the hostile setup.py runs, with any interpreter that has boto3 (an attacker would pip install it).
HOSTILE = r"""
import json, os
import boto3

bucket = os.environ["WF_BUCKET"]
job = json.load(open(os.path.join(os.environ["WF_WORK_DIR"], "meta", "job.json")))
own = job["run"]["prefix"]
s3 = boto3.client("s3")
attempts = {
    "another run's wheel": lambda: s3.put_object(Bucket=bucket, Key="VICTIM", Body=b"evil"),
    "framework cache": lambda: s3.put_object(Bucket=bucket, Key="sccache/cpu-x86_64/poison", Body=b"evil"),
    "read the framework cache": lambda: s3.get_object(Bucket=bucket, Key="sccache/cpu-x86_64/a/b/c/0123"),
    "another extension's cache": lambda: s3.put_object(
        Bucket=bucket, Key="sccache/ext-0000000000000000-cpu-x86_64/poison", Body=b"evil"
    ),
    "own job's wheels": lambda: s3.put_object(Bucket=bucket, Key=own + "wheels/evil-1.0-py3-none-any.whl", Body=b"x"),
    "another job's contract": lambda: s3.get_object(Bucket=bucket, Key="runs/victim-run/jobs/victim-cpu-x86_64/job.json"),
    "list the runs": lambda: s3.list_objects_v2(Bucket=bucket, Prefix="runs/"),
}
result = {"token": bool(os.environ.get("WF_TASK_TOKEN")), "host keys": bool(os.environ.get("AWS_ACCESS_KEY_ID"))}
for name, attempt in attempts.items():
    try:
        attempt()
        result[name] = "DONE"
    except Exception as exc:
        result[name] = getattr(exc, "response", {}).get("Error", {}).get("Code", type(exc).__name__)
# pip keeps setup.py quiet: the findings travel in the wheel itself, as a module of the package.
with open(os.path.join("wf_tiny_ext", "_hostile.py"), "w") as out:
    out.write("RESULT = " + json.dumps(result, sort_keys=True) + "\n")
""".replace("VICTIM", VICTIM)
HOSTILE_SETUP = (
    "import os, shutil, subprocess\n"
    "for d in os.environ['PATH'].split(os.pathsep):\n"
    "    python = os.path.join(d, 'python3')\n"
    "    if os.path.exists(python) and subprocess.run([python, '-c', 'import boto3']).returncode == 0:\n"
    "        subprocess.run([python, 'hostile.py'], check=True)\n"
    "        break\n"
    "else:\n"
    "    raise SystemExit('no interpreter with boto3')\n"
) + TINY_SETUP


@pytest.mark.heavy  # a whole run with a real build: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_a_hostile_build_cannot_touch_anything_outside_its_job(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    bucket = stack.outputs["WheelBucketName"]
    s3 = aws.client("s3")
    s3.put_object(Bucket=bucket, Key=VICTIM, Body=b"the victim's wheel")
    s3.put_object(Bucket=bucket, Key="runs/victim-run/jobs/victim-cpu-x86_64/job.json", Body=b"{}")
    folder = source(tmp_path, {"setup.py": HOSTILE_SETUP, "hostile.py": HOSTILE})

    result = run(aws, stack, extension_request(upload(aws, stack, folder), layout="per-cell"))

    assert result.succeeded, (result.error, result.cause)
    run_id = result.output["run_id"]
    log = s3.get_object(Bucket=bucket, Key=f"runs/{run_id}/jobs/wf-tiny-ext-cpu-x86_64/build.log")
    assert "job session wf-wf-tiny-ext-cpu-x86_64 (" in log["Body"].read().decode()
    (wheel,) = [k for k in s3_keys(aws, stack, "wheels/ci/") if k.endswith(".whl")]
    with zipfile.ZipFile(io.BytesIO(s3.get_object(Bucket=bucket, Key=wheel)["Body"].read())) as archive:
        attempts = json.loads(archive.read("wf_tiny_ext/_hostile.py").decode().removeprefix("RESULT = "))
    assert attempts == {
        "token": False,
        "host keys": False,
        "another run's wheel": "AccessDenied",
        "framework cache": "AccessDenied",
        "read the framework cache": "AccessDenied",
        "another extension's cache": "AccessDenied",
        "own job's wheels": "AccessDenied",
        "another job's contract": "AccessDenied",
        "list the runs": "AccessDenied",
    }
    # Nothing outside the job changed; the run published only its own, verified wheel.
    assert s3.get_object(Bucket=bucket, Key=VICTIM)["Body"].read() == b"the victim's wheel"
    assert not s3_keys(aws, stack, "sccache/cpu-x86_64/")
    assert not [k for k in s3_keys(aws, stack, "") if "evil" in k]
    assert result.output["published"] == 1
    assert wheel.startswith("wheels/ci/wf-tiny-ext/wf_tiny_ext-0.1.0+pt213cpu-cp311")
    pages = [k for k in s3_keys(aws, stack, "simple/ci/") if k.endswith("/")]  # with the (torch, CUDA) variant's
    assert pages == [
        "simple/ci/",
        "simple/ci/torch-2.13.0+cpu/",
        "simple/ci/torch-2.13.0+cpu/wf-tiny-ext/",
        "simple/ci/torch2.13-cpu/",  # the variant index (wheelfoundry.publishing.index_variants)
        "simple/ci/torch2.13-cpu/wf-tiny-ext/",
        "simple/ci/wf-tiny-ext/",
    ]
    # The refusals came from the job's own session of the extension job role.
    denied = {(d.principal.split("/")[1], d.action) for d in aws.server.iam.denied()}
    role = stack.physical_id("ExtensionJobRole")
    assert {(role, "s3:PutObject"), (role, "s3:GetObject"), (role, "s3:ListBucket")} <= denied
    # The runner held the extension instance role (the local agent gives each command its instance's role)
    # and everything it did was allowed by that role as deployed.
    runner = stack.physical_id("ExtensionBuildInstanceRole")
    by_runner = [d for d in aws.server.iam.decisions if d.principal.split("/")[1] == runner]
    assert {d.action for d in by_runner} >= {"s3:GetObject", "s3:PutObject"}
    assert all(d.result == "Allow" for d in by_runner), [d for d in by_runner if d.result != "Allow"]
