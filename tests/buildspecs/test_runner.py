"""The runner end to end in host mode against moto: S3 for job, source and results; a real Step
Functions task token from a ``.waitForTaskToken`` state that moto's interpreter executes."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import boto3
import pytest
import requests
from moto.server import ThreadedMotoServer

from tests.buildspecs.conftest import BUNDLE, example_source, run
from tests.buildspecs.jobs import plan_extension_job
from wfbuild.runner import finish, runner
from wheelfoundry_user.failures import cause_lines

OUTPUT_KEYS = {"job_id", "status", "manifest_key", "log_key", "wheels", "failures", "missing_cells"}
WHEEL_KEYS = {
    "filename",
    "key",
    "package",
    "version",
    "python",
    "sha256",
    "size",
    "requires_python",
    "metadata_key",
    "cell",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Aws:
    """One test's corner of the moto server: its own region, so its executions meet no others.

    moto keeps its state per process and StartExecution deep-copies the region's backend with the
    threads of its earlier executions, which fails (a moto limitation); a region per test avoids it.
    """

    # Regions taken in this process: moto keeps its backends per process, so every module's server (each
    # module that imports moto_endpoint starts its own) shares one set of buckets.
    _used: ClassVar[set[str]] = set()

    def __init__(self, endpoint: str, region: str) -> None:
        region = self._unused(region)
        self.endpoint, self.region, self.bucket = endpoint, region, f"wf-test-{region}"
        self.runs = 0
        kw: dict[str, Any] = {"endpoint_url": endpoint, "region_name": region}
        self.s3, self.sfn, self.sqs = (
            boto3.client("s3", **kw),
            boto3.client("stepfunctions", **kw),
            boto3.client("sqs", **kw),
        )
        self.s3.create_bucket(Bucket=self.bucket, CreateBucketConfiguration={"LocationConstraint": region})
        self.queue = self.sqs.create_queue(QueueName="build-tokens")["QueueUrl"]

    @classmethod
    def _unused(cls, region: str) -> str:
        """The region asked for, or the first one no earlier test of this process took (two modules on one
        pytest-xdist worker asking for the same region would meet each other's bucket)."""
        used = cls._used
        regions: list[str] = sorted(boto3.session.Session().get_available_regions("s3"))
        # us-east-1 takes no LocationConstraint: never handed out in its place
        free = [r for r in [region, *regions] if r not in used and r != "us-east-1"]
        if not free:
            raise RuntimeError("every region moto knows is taken by an earlier test of this process")
        used.add(free[0])
        return free[0]

    def task_token(self) -> tuple[str, str]:
        """Start an execution; its Build state hands its token to the queue."""
        self.runs += 1
        build = {
            "Type": "Task",
            "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
            "Parameters": {"QueueUrl": self.queue, "MessageBody": {"token.$": "$$.Task.Token"}},
            # Past every caller's own wait (the longest a test's 3000 s timeout): a cold CUDA build on a slow host
            # ends with the test's timeout, never with this state timing out under a runner still working.
            "TimeoutSeconds": 3600,
            "HeartbeatSeconds": 300,  # the runner beats every second (runner_env: WF_HEARTBEAT_SECONDS=1)
            "End": True,
        }
        definition = json.dumps({"StartAt": "Build", "States": {"Build": build}})
        role = "arn:aws:iam::123456789012:role/wf-test"
        machine = self.sfn.create_state_machine(name=f"build-{self.runs}", definition=definition, roleArn=role)
        execution = self.sfn.start_execution(stateMachineArn=machine["stateMachineArn"])["executionArn"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for message in self.sqs.receive_message(QueueUrl=self.queue, WaitTimeSeconds=1).get("Messages", []):
                self.sqs.delete_message(QueueUrl=self.queue, ReceiptHandle=message["ReceiptHandle"])
                return execution, json.loads(message["Body"])["token"]
        raise TimeoutError("no task token")

    def finished(self, execution: str) -> dict[str, Any]:
        deadline = time.monotonic() + 60  # generous: returns as soon as the execution ends, even on a loaded host
        while time.monotonic() < deadline:
            described: dict[str, Any] = self.sfn.describe_execution(executionArn=execution)
            if described["status"] != "RUNNING":
                return described
            time.sleep(0.1)
        raise TimeoutError(execution)

    def text(self, key: str) -> str:
        return str(self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read().decode())


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    port = free_port()
    with pytest.MonkeyPatch.context() as mp:
        # moto's interpreter calls SQS through its own clients at localhost:$MOTO_PORT.
        mp.setenv("MOTO_PORT", str(port))
        for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
            mp.setenv(name, value)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        endpoint = f"http://127.0.0.1:{port}"
        requests.post(
            f"{endpoint}/moto-api/config", json={"stepfunctions": {"execute_state_machine": True}}, timeout=10
        )
        yield endpoint
        server.stop()


# One region (and so one bucket) per test of this module: the moto server is shared.
REGIONS = iter(
    [
        "us-west-2",
        "eu-west-1",
        "eu-central-1",
        "ap-southeast-2",
        "ca-central-1",
        "sa-east-1",
        "us-east-2",
        "ap-northeast-1",
        "eu-north-1",
        "ap-south-1",
    ]
)


@pytest.fixture
def aws(moto_endpoint: str) -> Aws:
    return Aws(moto_endpoint, next(REGIONS))


def tarball(src: Path, top: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(src, arcname=top)
    return buffer.getvalue()


def put_job(
    aws: Aws, name: str, source: bytes, keep: bool = False, build_env: dict[str, str] | None = None
) -> tuple[dict[str, Any], str]:
    key = f"sources/{name}.tar.gz"
    aws.s3.put_object(Bucket=aws.bucket, Key=key, Body=source)
    job = plan_extension_job(name, f"s3://{aws.bucket}/{key}", keep_on_failure=keep, build_env=build_env)
    prefix = f"runs/run-1/jobs/{job['id']}/"
    job["run"] = {"id": "run-1", "bucket": aws.bucket, "prefix": prefix, "channel": "dev", "ecr_repository": "",
                  "region": aws.region}  # fmt: skip
    aws.s3.put_object(Bucket=aws.bucket, Key=f"{prefix}job.json", Body=json.dumps(job).encode())
    return job, f"{prefix}job.json"


def runner_env(aws: Aws, job_key: str, token: str, work: Path, cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WF_", "AWS_", "MOTO_"))}
    env.update(
        {
            "WF_TASK_TOKEN": token, "WF_BUCKET": aws.bucket, "WF_JOB_KEY": job_key, "WF_HEARTBEAT_SECONDS": "1",
            "WF_WORK_DIR": str(work), "WF_BUNDLE_DIR": str(BUNDLE), "WF_CONTAINER": "none",
            "WF_CACHE_DIR": str(cache), "AWS_REGION": aws.region, "AWS_ENDPOINT_URL": aws.endpoint,
            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            # Nothing listens here: the spot watch must notice there is no IMDS and end quietly.
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{free_port()}",
            "PYTHONPATH": str(BUNDLE), **extra,
        }
    )  # fmt: skip
    return env


def clients(
    aws: Aws, calls: list[tuple[str, dict[str, Any]]], puts: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Real clients on moto; the Step Functions one records what the runner sends (S3's PutObject too)."""
    sfn = boto3.client("stepfunctions", endpoint_url=aws.endpoint, region_name=aws.region)
    for op in ("SendTaskSuccess", "SendTaskFailure", "SendTaskHeartbeat"):
        sfn.meta.events.register(
            f"provide-client-params.states.{op}", lambda params, op=op, **_: calls.append((op, params))
        )
    s3 = boto3.client("s3", endpoint_url=aws.endpoint, region_name=aws.region)
    if puts is not None:
        s3.meta.events.register("provide-client-params.s3.PutObject", lambda params, **_: puts.append(params))
    return {"s3": s3, "stepfunctions": sfn}


def test_two_modules_asking_one_region_get_their_own_buckets(moto_endpoint: str) -> None:
    """Modules on one pytest-xdist worker share moto's state: a region asked for twice is not given twice."""
    first, second = Aws(moto_endpoint, "me-south-1"), Aws(moto_endpoint, "me-south-1")
    assert first.region == "me-south-1" and second.region not in ("me-south-1", "us-east-1")
    assert first.bucket != second.bucket and second.s3.head_bucket(Bucket=second.bucket)


@pytest.mark.heavy  # a real build: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_extension_job_succeeds(aws: Aws, cache_dir: Path, tmp_path: Path) -> None:
    source = tarball(example_source(tmp_path / "src"), "wf-example-ops-0.1.0")
    job, job_key = put_job(aws, "wf-example-ops", source)
    execution, token = aws.task_token()
    work = tmp_path / "work"
    proc = run([sys.executable, "-m", "wfbuild.runner.runner"], runner_env(aws, job_key, token, work, cache_dir))
    assert proc.returncode == 0, proc.stdout[-4000:]

    described = aws.finished(execution)
    assert described["status"] == "SUCCEEDED"
    output = json.loads(described["output"])
    assert set(output) == OUTPUT_KEYS
    prefix = job["run"]["prefix"]
    assert (output["job_id"], output["status"], output["failures"]) == (job["id"], "succeeded", [])
    assert (output["manifest_key"], output["log_key"]) == (f"{prefix}manifest.json", f"{prefix}build.log")
    (wheel,) = output["wheels"]
    assert set(wheel) == WHEEL_KEYS
    assert wheel["filename"].startswith("wf_example_ops-0.1.0+pt213cpu-cp311-cp311-manylinux_2_")
    assert (wheel["package"], wheel["version"], wheel["python"]) == ("wf-example-ops", "0.1.0+pt213cpu", "3.11")
    assert wheel["key"] == f"{prefix}wheels/{wheel['filename']}" and wheel["requires_python"] == ">=3.9"
    obj = aws.s3.get_object(Bucket=aws.bucket, Key=wheel["key"])
    body = obj["Body"].read()
    assert hashlib.sha256(body).hexdigest() == wheel["sha256"] == obj["Metadata"]["sha256"]
    assert len(body) == wheel["size"] and obj["Metadata"]["requires-python"] == ">=3.9"
    assert "Version: 0.1.0+pt213cpu" in aws.text(wheel["metadata_key"])

    manifest = json.loads(aws.text(output["manifest_key"]))
    assert manifest["status"] == "succeeded" and manifest["job_id"] == job["id"]
    assert manifest["sources"]["wf-example-ops"]["sha256"] == hashlib.sha256(source).hexdigest()
    ran = {s["name"]: s for s in manifest["stages"]}
    cell = "torch2.13.0-cp311-cpu-x86_64"
    assert list(ran) == [
        *("fetch-source", f"env-{cell}", f"build-{cell}", f"abi-{cell}", f"repair-{cell}", f"smoke-{cell}", "manifest")
    ]
    # The example's ATen operators bind it to torch 2.13 (wfbuild.wheels.abi, read from the built file's imports).
    (reading,) = manifest["abi"].values()
    assert reading["cell"] == cell and reading["stable"] is False and reading["floor"] is None
    assert wheel_entry_abi(manifest, cell)["stable"] is False
    assert wheel["cell"]["id"] == cell and wheel["cell"]["build_id"] == "torch2.13-cpu"
    assert all(s["status"] == "succeeded" and s["seconds"] >= 0 for s in ran.values())
    usage = manifest["compile_usage"]  # the build stage under wfbuild.compiling.cpu_usage: its compiler's CPU seconds
    assert usage["stages"] == 1 and usage["cpu_seconds"] > 1.0 and usage["cores"] >= 1
    assert usage["wall_seconds"] <= ran[f"build-{cell}"]["seconds"] + 1.0
    # cores_busy comes from the unrounded seconds; the manifest rounds each to 0.01 s. So the ratio of the
    # rounded figures may differ by their rounding (0.005 s on each) plus cores_busy's own (0.0005).
    ratio = usage["cpu_seconds"] / usage["wall_seconds"] / usage["cores"]
    tolerance = ratio * (0.005 / usage["cpu_seconds"] + 0.005 / usage["wall_seconds"]) + 0.0005
    assert abs(usage["cores_busy"] - ratio) <= tolerance, (usage, ratio, tolerance)
    assert ran[f"build-{cell}"]["cpu_seconds"] == usage["cpu_seconds"]  # one stage: all of it, server included
    assert "cpu_seconds" not in ran[f"env-{cell}"]  # only compile stages are measured
    assert manifest["toolchain"]["python"] == {"cp311-torch2.13.0": f"Python {sys.version.split()[0]}"}
    log = aws.text(output["log_key"])
    assert f"stage smoke-{cell}: succeeded" in log and "smoke passed" in log
    assert f"cores busy {usage['cores_busy']:.2f}" in log
    assert "no instance metadata service: not watching for spot interruptions" in log
    assert not work.exists(), "a successful job's work dir is removed"


def wheel_entry_abi(manifest: dict[str, Any], cell: str) -> dict[str, Any]:
    (entry,) = [w for w in manifest["wheels"] if (w.get("cell") or {}).get("id") == cell]
    reading: dict[str, Any] = entry["abi"]
    return reading


def broken_source(tmp: Path) -> bytes:
    src = tmp / "broken"
    src.mkdir()
    (src / "setup.py").write_text(
        "from setuptools import setup\nfrom torch.utils.cpp_extension import BuildExtension, CppExtension\n"
        "setup(name='broken-ext', version='1.0', ext_modules=[CppExtension('broken_ext', ['broken.cpp'])],\n"
        "      cmdclass={'build_ext': BuildExtension})\n"
    )
    (src / "broken.cpp").write_text("this is not C++ at all;\n")
    return tarball(src, "broken-ext-1.0")


def test_failed_build_reports_build_failed_with_log(aws: Aws, cache_dir: Path, tmp_path: Path) -> None:
    job, job_key = put_job(aws, "broken-ext", broken_source(tmp_path), keep=True)
    execution, token = aws.task_token()
    work = tmp_path / "work"
    calls: list[tuple[str, dict[str, Any]]] = []
    code = runner.run(runner_env(aws, job_key, token, work, cache_dir), clients(aws, calls))
    assert code == 1
    (failure,) = [params for op, params in calls if op == "SendTaskFailure"]
    assert not [op for op, _ in calls if op == "SendTaskSuccess"]
    assert [p["taskToken"] for op, p in calls if op == "SendTaskHeartbeat"][:1] == [token], "heartbeats while building"
    assert calls[-1][0] == "SendTaskFailure", "no heartbeat after the final callback"
    assert failure["error"] == "BuildFailed" and len(failure["cause"]) <= 32_000
    cause = json.loads(failure["cause"])
    prefix = job["run"]["prefix"]
    assert cause["job_id"] == job["id"] and cause["stage"] == "build-torch2.13.0-cp311-cpu-x86_64"
    assert cause["log_key"] == f"{prefix}build.log" and "broken.cpp" in cause["log_tail"]
    # what a user is shown first: the compiler's error, though setup.py's traceback follows it for 100 lines
    assert any("broken.cpp" in line and ": error: " in line for line in cause_lines(cause["log_tail"]))
    assert aws.finished(execution)["status"] == "FAILED"
    assert "this is not C++" in aws.text(f"{prefix}build.log")
    manifest = json.loads(aws.text(f"{prefix}manifest.json"))
    assert manifest["status"] == "failed" and manifest["wheels"] == []
    (entry,) = manifest["failures"]
    assert (entry["stage"], entry["package"], entry["python"]) == (
        "build-torch2.13.0-cp311-cpu-x86_64",
        "broken-ext",
        "3.11",
    )
    assert "error: the build backend failed for" in entry["log_tail"] and entry["error"].startswith("exit status 1")
    skipped = {s["name"]: s["status"] for s in manifest["stages"]}
    assert skipped["repair-torch2.13.0-cp311-cpu-x86_64"] == skipped["smoke-torch2.13.0-cp311-cpu-x86_64"] == "skipped"
    assert (work / "build.log").exists(), "keep_on_failure keeps the work dir"


def test_lost_token_stops_the_build_without_callback(aws: Aws, tmp_path: Path) -> None:
    source = tarball(example_source(tmp_path / "src"), "wf-example-ops-0.1.0")
    job, job_key = put_job(aws, "wf-example-ops", source)
    calls: list[tuple[str, dict[str, Any]]] = []
    puts: list[dict[str, Any]] = []
    work, cache = tmp_path / "work", tmp_path / "cache"
    env = runner_env(
        aws, job_key, "not-a-task-token", work, cache, WF_HEARTBEAT_SECONDS="0.3", WF_LOG_UPLOAD_SECONDS="0.1"
    )
    started = time.monotonic()
    assert runner.run(env, clients(aws, calls, puts)) == 3
    assert time.monotonic() - started < 60, "the running stage is stopped, not waited for"
    assert {op for op, _ in calls} == {"SendTaskHeartbeat"}
    log = aws.text(f"{job['run']['prefix']}build.log")
    assert "task token gone (InvalidToken): stopping the build" in log
    # The live log (wheelfoundry logs --follow): any partial uploads while it ran, the untagged final one
    # last. (The first beat goes as the runner starts, so the build may stop before a partial upload.)
    logs = [p.get("Metadata") for p in puts if p["Key"] == f"{job['run']['prefix']}build.log"]
    assert logs and not logs[-1] and all(m == {"wf-log": "partial"} for m in logs[:-1]), logs
    assert json.loads(aws.text(f"{job['run']['prefix']}manifest.json"))["status"] == "failed"


class FakeImds(http.server.BaseHTTPRequestHandler):
    polls = 0

    def do_PUT(self) -> None:
        self._reply(200, "imds-token")

    def do_GET(self) -> None:
        if self.headers.get("X-aws-ec2-metadata-token") != "imds-token":
            self._reply(401, "")
        elif self.path.endswith("instance-life-cycle"):
            self._reply(200, "spot")
        elif self.path.endswith("spot/instance-action"):
            FakeImds.polls += 1
            notice = '{"action": "terminate", "time": "2026-11-22T04:00:00Z"}'
            self._reply(200, notice) if FakeImds.polls > 2 else self._reply(404, "")
        else:
            self._reply(404, "")

    def _reply(self, status: int, body: str) -> None:
        self.send_response(status)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


def test_spot_interruption_fails_the_task(aws: Aws, tmp_path: Path) -> None:
    imds = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeImds)
    threading.Thread(target=imds.serve_forever, daemon=True).start()
    source = tarball(example_source(tmp_path / "src"), "wf-example-ops-0.1.0")
    job, job_key = put_job(aws, "wf-example-ops", source)
    execution, token = aws.task_token()
    calls: list[tuple[str, dict[str, Any]]] = []
    env = runner_env(aws, job_key, token, tmp_path / "work", tmp_path / "cache", WF_SPOT_POLL_SECONDS="0.2")
    env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = f"http://127.0.0.1:{imds.server_address[1]}"
    try:
        assert runner.run(env, clients(aws, calls)) == 1
    finally:
        imds.shutdown()
    (failure,) = [params for op, params in calls if op == "SendTaskFailure"]
    assert failure["error"] == "SpotInterrupted"
    assert json.loads(failure["cause"])["log_key"] == f"{job['run']['prefix']}build.log"
    assert aws.finished(execution)["status"] == "FAILED"
    # The attempt's last log is complete but tagged interrupted: `logs --follow` waits for the next attempt.
    head = aws.s3.head_object(Bucket=aws.bucket, Key=f"{job['run']['prefix']}build.log")
    assert head["Metadata"] == {"wf-log": "interrupted"}


@pytest.mark.heavy  # a real build: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_container_mode_builds_the_image_and_runs_stages_in_it(aws: Aws, cache_dir: Path, tmp_path: Path) -> None:
    """WF_CONTAINER=docker with a stand-in docker CLI: image built once, stages run through
    ``docker run`` with an env file and their mounts, the S3 fetch on the host."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text(
        f'#!/usr/bin/env bash\nexec "{sys.executable}" "{Path(__file__).parent / "fake_docker.py"}" "$@"\n'
    )
    (fake / "docker").chmod(0o755)
    job, job_key = put_job(aws, "broken-ext", broken_source(tmp_path), keep=True)
    execution, token = aws.task_token()
    calls: list[tuple[str, dict[str, Any]]] = []
    log = tmp_path / "docker.log"
    path = os.pathsep.join([str(fake), str(Path(sys.executable).parent), os.environ["PATH"]])
    env = runner_env(aws, job_key, token, tmp_path / "work", cache_dir, WF_CONTAINER="docker", PATH=path)
    env["FAKE_DOCKER_LOG"] = str(log)
    assert runner.run(env, clients(aws, calls)) == 1
    docker = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c[:2] for c in docker[:2]] == [["image", "inspect"], ["build", "--pull"]]
    tag = docker[0][2]
    base = f"BASE_IMAGE={job['image']['base']}@sha256:"  # pinned from base-images.lock
    assert tag.startswith("wheelfoundry-builder:x86_64-cpu-") and any(a.startswith(base) for a in docker[1])
    runs = [c for c in docker if c[0] == "run"]
    assert [c[c.index(tag) + 1 :] for c in runs] == [
        ["python3", "-m", "wfbuild.envs", "--python", "3.11", "--dest", "/work/envs/cp311-torch2.13.0", "--torch", "torch==2.13.0",
         "--pip", "setuptools", "--pip", "wheel", "--pip", "ninja"],
        ["python3", "-m", "wfbuild.compiling.cpu_usage", "--out", "/work/meta/usage/build-torch2.13.0-cp311-cpu-x86_64.json",
         "--", "bash", "/bundle/stages/build-library.sh"],
        ["python3", "-m", "wfbuild.runner.manifest", "--work-dir", "/work", "--out", "/work/manifest.json"],
    ]  # fmt: skip
    # The loopback emulator: host networking for the stages that need a network, none for the manifest.
    assert [c[c.index("--network") + 1] for c in runs] == ["host", "host", "none"]
    assert all(f"{BUNDLE}:/bundle:ro" in c for c in runs), "fetch-source ran on the host, the rest in the image"
    # The work tree is the build's only writable mount; the job session's folder (the runner's own, beside the
    # tree) is mounted read-only outside /work. This is a local run (WF_CACHE_DIR): the machine's environments
    # are at /cache, writable only to the env stage (torch and the cell's tools, none of the package's code).
    shared = cache_dir.resolve() / "container-envs"
    mounts = [
        f"{tmp_path / 'work'}:/work",
        f"{BUNDLE}:/bundle:ro",
        f"{tmp_path / 'work.runner' / 'aws'}:/run/wf/aws:ro",
    ]
    expected = [[*mounts, f"{shared}:/cache:{mode}"] for mode in ("rw", "ro", "ro")]
    assert [[a for a in c if a.startswith("/") and ":/" in a] for c in runs] == expected
    env_stage = (tmp_path / "work.runner" / "env" / "env-torch2.13.0-cp311-cpu-x86_64.env").read_text()
    assert "WF_CACHE_DIR=/cache\n" in env_stage
    (failure,) = [params for op, params in calls if op == "SendTaskFailure"]
    assert json.loads(failure["cause"])["stage"] == "build-torch2.13.0-cp311-cpu-x86_64"
    env_file = (tmp_path / "work.runner" / "env" / "build-torch2.13.0-cp311-cpu-x86_64.env").read_text()
    assert not (tmp_path / "work" / "meta" / "env").exists(), "the env files stay out of the mounted tree"
    assert "PYTHONPATH=/bundle\n" in env_file and "WF_SRC_DIR=/work/src/broken-ext\n" in env_file
    assert "WF_CACHE_DIR" not in env_file
    assert token not in env_file
    # No job role in this job.json: the build gets no AWS identity at all (fail closed), none of the host's.
    assert "AWS_SHARED_CREDENTIALS_FILE=/dev/null\n" in env_file and "AWS_ACCESS_KEY_ID" not in env_file
    assert aws.finished(execution)["status"] == "FAILED"


@pytest.mark.heavy  # a real build: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_container_mode_compiles_under_a_server_per_stage_and_the_manifest_adds_their_stats(
    aws: Aws, cache_dir: Path, tmp_path: Path
) -> None:
    """A job that wants the stack's cache: in the image, each compile stage (and only those) runs under
    ``python3 -m wfbuild.compiling.compiler_cache`` (its own server: the container's), whose stats the runner adds up."""
    from wfbuild.compiling import cache_stats, compiler_cache

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text(
        f'#!/usr/bin/env bash\nexec "{sys.executable}" "{Path(__file__).parent / "fake_docker.py"}" "$@"\n'
    )
    (fake / "docker").chmod(0o755)
    sccache = compiler_cache.install(BUNDLE, cache_dir, lambda argv: subprocess.run(argv, check=False).returncode)
    assert sccache is not None  # the image's /usr/local/bin/sccache, from the same lock
    key = "sources/broken-ext.tar.gz"
    aws.s3.put_object(Bucket=aws.bucket, Key=key, Body=broken_source(tmp_path))
    job = plan_extension_job("broken-ext", f"s3://{aws.bucket}/{key}", keep_on_failure=True)
    job["env"] |= {"SCCACHE_BUCKET": aws.bucket, "CMAKE_C_COMPILER_LAUNCHER": "sccache"}
    prefix = f"runs/run-1/jobs/{job['id']}/"
    job["run"] = {"id": "run-1", "bucket": aws.bucket, "prefix": prefix, "channel": "dev", "region": aws.region}
    aws.s3.put_object(Bucket=aws.bucket, Key=f"{prefix}job.json", Body=json.dumps(job).encode())
    execution, token = aws.task_token()
    log = tmp_path / "docker.log"
    path = os.pathsep.join([str(fake), str(sccache.parent), str(Path(sys.executable).parent), os.environ["PATH"]])
    env = runner_env(aws, f"{prefix}job.json", token, tmp_path / "work", cache_dir, WF_CONTAINER="docker", PATH=path)
    env["FAKE_DOCKER_LOG"] = str(log)
    assert runner.run(env, clients(aws, [])) == 1  # broken-ext does not compile
    runs = [c for c in (json.loads(line) for line in log.read_text().splitlines()) if c[0] == "run"]
    commands = [c[c.index("-w") + 3 :] for c in runs]
    build = "build-torch2.13.0-cp311-cpu-x86_64"
    assert commands[1] == [
        "python3", "-m", "wfbuild.compiling.cpu_usage", "--out", f"/work/meta/usage/{build}.json", "--",
        "python3", "-m", "wfbuild.compiling.compiler_cache", "--stats", f"/work/meta/sccache/{build}.json", "--wrap", "--",
        "bash", "/bundle/stages/build-library.sh",
    ]  # fmt: skip
    assert commands[0][:3] == ["python3", "-m", "wfbuild.envs"] and commands[2][:3] == [
        "python3",
        "-m",
        "wfbuild.runner.manifest",
    ]
    manifest = json.loads(aws.s3.get_object(Bucket=aws.bucket, Key=f"{prefix}manifest.json")["Body"].read())
    stats = manifest["compiler_cache"]
    work = tmp_path / "work"
    assert stats == cache_stats.read_stats(work, work / "meta" / "sccache" / f"{build}.json", pytest.fail)
    assert stats["status"] in ("used", "unavailable")  # no job role here: the server may find no credentials
    assert cache_stats.describe(stats) in (tmp_path / "work" / "build.log").read_text()
    assert aws.finished(execution)["status"] == "FAILED"


def test_links_the_build_plants_in_its_tree_never_reach_host_files(aws: Aws, tmp_path: Path) -> None:
    """In the image the build is root in a read-write /work: whatever it leaves there may be a link to a
    host file. The runner (root on the host) refuses to read, upload or write through any of them."""
    from wfbuild import hostfiles
    from wfbuild.runner import callback

    secret = tmp_path / "host-secret.json"
    secret.write_text(json.dumps({"status": "succeeded", "wheels": [], "HOST": "SECRET"}))
    work = tmp_path / "work"
    (work / "meta").mkdir(parents=True)
    (work / "manifest.json").symlink_to(secret)
    (work / "meta" / "stages.json").symlink_to(secret)
    (work / "dist").mkdir()
    (work / "dist" / "x-1.0-py3-none-any.whl").symlink_to(secret)
    job, key = put_job(aws, "links", b"")
    env = runner_env(aws, key, "", work, tmp_path / "cache", WF_CONTAINER="docker")
    built = runner.Job(env, clients(aws, []))
    built.job = job
    data = finish.load_manifest(built)  # stages.json is a link: refused, and the link target is untouched
    assert data["status"] == "failed" and "SECRET" not in json.dumps(data)
    assert json.loads(secret.read_text())["HOST"] == "SECRET"
    assert "SECRET" not in (tmp_path / "work.runner" / "manifest.json").read_text()
    (work / "meta" / "stages.json").unlink()
    refused = finish.load_manifest(built)  # now manifest.json itself: a link, refused
    assert "manifest.json: Too many levels of symbolic links" in refused["failures"][0]["error"]
    entry = {"smoke": "passed", "name": "x-1.0-py3-none-any.whl", "path": "dist/x-1.0-py3-none-any.whl",
             "sha256": "0" * 64, "requires_python": ""}  # fmt: skip
    with pytest.raises(hostfiles.UnsafeFile):
        callback.upload_wheels(aws.s3, aws.bucket, "runs/r/jobs/links/", work, {"wheels": [entry]})
    with pytest.raises(hostfiles.UnsafeFile, match="not a wheel file name"):
        callback.upload_wheels(
            aws.s3, aws.bucket, "runs/r/jobs/links/", work, {"wheels": [{**entry, "name": "../x.whl"}]}
        )
    assert "Contents" not in aws.s3.list_objects_v2(Bucket=aws.bucket, Prefix="runs/r/jobs/links/wheels/")
    (work / "meta").rename(work / "meta-real")
    (work / "meta").symlink_to(tmp_path)  # a folder link: writing meta/stages.json would land beside the tree
    with pytest.raises(hostfiles.UnsafeFile, match="outside the job's folder"):
        hostfiles.write_inside(work, work / "meta" / "stages.json", b"[]")
    assert not (tmp_path / "stages.json").exists()
