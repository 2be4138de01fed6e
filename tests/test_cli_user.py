"""The user's commands (cli/wheelfoundry_user) against the shipped stack in the embedded AWS.

No build runs here: a run is kept in AwaitAgent (its instance never registers) for start, status,
runs, logs, fetch-while-running and cancel; a channel is published by hand for index list and
fetch. tests/local/test_local_up.py runs a real build through `local up` and the AWS CLI.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from wheelfoundry_cli.main import main

from wheelfoundry.publishing.index import publish_index
from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_local.testing import aws, embedded_aws  # noqa: F401
from wheelfoundry_user import EXIT_FAILED, EXIT_INVALID, EXIT_NOT_FOUND, EXIT_NOT_READY, EXIT_OK

ROOT = Path(__file__).resolve().parents[1]
WHEEL = "wf_tiny_ext-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl"


@pytest.fixture
def stack(aws: EmbeddedAws) -> Iterator[DeployedStack]:  # noqa: F811
    saved = aws.registration.delay
    aws.registration.delay = 1e6  # instances never come online: runs wait in AwaitAgent
    try:
        yield aws.deploy(ROOT / "template.yaml", {"BuildHeartbeatSeconds": "60"})
    finally:
        aws.registration.delay = saved


def wf(aws: EmbeddedAws, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:  # noqa: F811
    capsys.readouterr()
    code = main([*args, "--endpoint-url", aws.endpoint])
    out, err = capsys.readouterr()
    return code, out, err


def parsed(out: str) -> Any:
    """The command's --json document (handlers running in this process log JSON lines before it)."""
    lines = out.splitlines()
    start = max(i for i, line in enumerate(lines) if line in ("{", "[", "[]"))
    return json.loads("\n".join(lines[start:]))


def ec2_request(tmp_path: Path, stack: DeployedStack) -> Path:
    request = json.loads((ROOT / "examples/requests/extension-demo.json").read_text())
    request["source"] = {"s3": f"s3://{stack.outputs['WheelBucketName']}/sources/never-fetched.tar.gz"}
    request["options"] = {"executor": "ec2"}
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    return path


def wait_for(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


@pytest.mark.heavy  # a whole run with a real build: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_run_lifecycle_start_status_runs_logs_fetch_cancel(
    aws: EmbeddedAws,  # noqa: F811
    stack: DeployedStack,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = wf(aws, capsys, "start", str(ec2_request(tmp_path, stack)), "--name", "run-1", "--json")
    assert code == EXIT_OK, err
    assert parsed(out)["run"] == "run-1"
    instances = lambda: [i for i in aws.instances() if i["Tags"].get("wheelfoundry:run") == "run-1"]  # noqa: E731
    wait_for(instances)

    code, out, _ = wf(aws, capsys, "status", "run-1", "--json")
    status = parsed(out)
    assert code == EXIT_OK and status["status"] == "RUNNING" and status["channel"] == "demo"
    job, test = status["jobs"]  # the build job, then the test job of the published bytes (after Merge)
    assert test["job"] == "wf-example-ops-test-cp311-x86_64" and (test["state"], test["stage"]) == (
        "waiting",
        "builds, then merge",
    )
    assert job["executor"] == "ec2" and job["state"] in ("pending", "running") and job["estimated_usd"] > 0
    code, out, _ = wf(aws, capsys, "status")  # the newest run, as a table
    assert code == EXIT_OK and "run run-1: RUNNING, 0/2 jobs done" in out and job["job"] in out
    code, out, _ = wf(aws, capsys, "runs")
    assert code == EXIT_OK and "run-1" in out and "RUNNING" in out

    code, _, err = wf(aws, capsys, "logs", "run-1", job["job"])
    assert code == EXIT_NOT_READY and "no build.log yet" in err
    log_key = f"runs/run-1/jobs/{job['job']}/build.log"
    aws.client("s3").put_object(Bucket=stack.outputs["WheelBucketName"], Key=log_key, Body=b"[wfbuild] stage x\n")
    code, out, _ = wf(aws, capsys, "logs", "run-1", job["job"], "--follow")
    assert code == EXIT_OK and out.endswith("[wfbuild] stage x\n")
    code, _, err = wf(aws, capsys, "logs", "run-1", "no-such-job")
    assert code == EXIT_NOT_FOUND and job["job"] in err
    code, _, err = wf(aws, capsys, "fetch", "run-1", "--dest", str(tmp_path / "dist"))
    assert code == EXIT_NOT_READY and "still running" in err

    code, out, err = wf(aws, capsys, "cancel", "run-1", "--wait", "30", "--json")
    cancelled = parsed(out)
    assert code == EXIT_OK, err
    assert cancelled["status"] == "ABORTED" and cancelled["left_running"] == []
    assert cancelled["instances"] and all(i["state"] in ("shutting-down", "terminated") for i in cancelled["instances"])
    assert not instances()
    code, out, _ = wf(aws, capsys, "status", "run-1")
    assert code == EXIT_FAILED and "ABORTED" in out


def test_invalid_request_is_refused_before_anything_starts(
    aws: EmbeddedAws,  # noqa: F811
    stack: DeployedStack,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"framework": "extension", "nme": "x"}))
    assert wf(aws, capsys, "start", str(bad))[0] == EXIT_INVALID
    assert aws.client("stepfunctions").list_executions(stateMachineArn=stack.state_machine_arn)["executions"] == []


def test_a_request_the_stacks_validate_refuses_exits_2_with_its_problems(
    aws: EmbeddedAws,  # noqa: F811
    stack: DeployedStack,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Valid here, but only the stack knows where its build roles may read: a source outside its bucket.
    path = ec2_request(tmp_path, stack)
    request = json.loads(path.read_text())
    request["source"] = {"s3": "s3://someone-elses-bucket/sources/x.tar.gz"}
    path.write_text(json.dumps(request))
    code, out, err = wf(aws, capsys, "start", str(path), "--name", "run-refused", "--json")
    assert code == EXIT_INVALID, (out, err)
    assert "Validate refused the request (RequestInvalid)" in err and "source.s3" in err
    assert "s3://someone-elses-bucket/sources/x.tar.gz" in err and "sources/<key>" in err
    assert parsed(out)["error"] == "RequestInvalid" and parsed(out)["status"] == "FAILED"
    assert aws.instances(states=("pending", "running", "terminated")) == []
    code, out, err = wf(aws, capsys, "start", str(path), "--name", "run-unchecked", "--no-wait", "--json")
    unchecked = parsed(out)
    assert code == EXIT_OK and unchecked["validated"] is False  # --no-wait: the run's status tells later
    sfn = aws.client("stepfunctions")
    wait_for(lambda: sfn.describe_execution(executionArn=unchecked["execution_arn"])["status"] == "FAILED")


def test_missing_stack_run_and_channel_are_named(
    aws: EmbeddedAws,  # noqa: F811
    stack: DeployedStack,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = wf(aws, capsys, "runs", "--stack", "no-such-stack")
    assert code == EXIT_NOT_FOUND and "no stack 'no-such-stack'" in err
    code, _, err = wf(aws, capsys, "status", "no-such-run")
    assert code == EXIT_NOT_FOUND and "no run 'no-such-run'" in err
    code, _, err = wf(aws, capsys, "cancel", "no-such-run")
    assert code == EXIT_NOT_FOUND
    code, _, err = wf(aws, capsys, "index", "list", "nightly")
    assert code == EXIT_NOT_FOUND and "no channel 'nightly'" in err
    code, out, _ = wf(aws, capsys, "runs")
    assert code == EXIT_OK and "no runs yet" in out


def test_index_list_and_fetch_check_sha256_against_the_index(
    aws: EmbeddedAws,  # noqa: F811
    stack: DeployedStack,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    s3, bucket = aws.client("s3"), stack.outputs["WheelBucketName"]
    body = b"PK\x05\x06" + b"\0" * 18  # an empty zip: fetch checks bytes, not contents
    digest = hashlib.sha256(body).hexdigest()
    key = f"wheels/ci/wf-tiny-ext/{WHEEL}"
    s3.put_object(Bucket=bucket, Key=key, Body=body, Metadata={"sha256": digest})
    publish_index(s3, bucket, "ci")

    code, out, _ = wf(aws, capsys, "index", "list", "--json")
    assert code == EXIT_OK and parsed(out) == ["ci"]
    code, out, _ = wf(aws, capsys, "index", "list", "ci")
    assert code == EXIT_OK and WHEEL in out and digest in out
    # Published by hand, so never signed: fetch refuses it unless told not to verify.
    code, _, err = wf(aws, capsys, "fetch", "ci", "wf_tiny_ext", "--dest", str(tmp_path / "u"))
    assert code == EXIT_FAILED and f"REFUSED {WHEEL}: no provenance ({WHEEL}.provenance.json not in the bucket)" in err
    assert list((tmp_path / "u").iterdir()) == []
    argv = ("fetch", "ci", "wf_tiny_ext", "--no-verify", "--dest", str(tmp_path / "a"), "--json")
    code, out, err = wf(aws, capsys, *argv)
    assert code == EXIT_OK and parsed(out)[0]["sha256"] == digest and "signatures NOT checked" in err
    assert hashlib.sha256((tmp_path / "a" / WHEEL).read_bytes()).hexdigest() == digest
    code, _, err = wf(aws, capsys, "fetch", "ci", "other-package", "--dest", str(tmp_path / "b"))
    assert code == EXIT_NOT_FOUND and "other-package" in err

    s3.put_object(Bucket=bucket, Key=key, Body=body + b"tampered", Metadata={"sha256": digest})
    code, _, err = wf(aws, capsys, "fetch", "ci", "--no-verify", "--dest", str(tmp_path / "c"))
    assert code == EXIT_FAILED and "differs from the index" in err
    assert list((tmp_path / "c").iterdir()) == []  # no partial download either
