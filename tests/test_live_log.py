"""An EC2 job's live build log: the runner's LogUploader puts build.log, as written so far and tagged
partial, at the job's key while it builds; `wheelfoundry logs --follow` prints each new byte once
until the runner's final (untagged) upload. moto's S3 in-process; no build runs here
(tests/buildspecs/test_runner.py checks that a real runner starts the uploader)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from wfbuild.execute import BuildLog
from wfbuild.runner.callback import LOG_INTERRUPTED, LOG_PARTIAL, LogUploader, start_log_uploads
from wheelfoundry_user import EXIT_OK
from wheelfoundry_user.farm import Farm
from wheelfoundry_user.logs import show_log

BUCKET, RUN, JOB = "wf-bucket", "run-1", "ext-job"
PREFIX = f"runs/{RUN}/jobs/{JOB}/"
KEY = f"{PREFIX}build.log"


class Executions:
    """Step Functions as the CLI sees it: one run, RUNNING until the test says otherwise."""

    def __init__(self) -> None:
        self.status = "RUNNING"

    def describe_execution(self, executionArn: str) -> dict[str, Any]:
        return {"name": executionArn.rsplit(":", 1)[-1], "status": self.status}


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}job.json", Body=b"{}")
        yield client


def farm(s3: Any, executions: Executions) -> Farm:
    outputs = {"StateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:wf-build"}
    return Farm("wf", _clients={"s3": s3, "stepfunctions": executions}, _outputs={**outputs, "WheelBucketName": BUCKET})


def final_upload(uploader: LogUploader, log: BuildLog, s3: Any) -> None:
    """What the runner's finish does: stop the uploads, close the log, upload it once more."""
    uploader.stopped.set()
    log.close()
    s3.upload_file(str(log.path), BUCKET, KEY)


def test_follow_prints_each_byte_of_the_growing_log_once_until_the_final_upload(s3: Any, tmp_path: Path) -> None:
    log = BuildLog(tmp_path / "build.log")
    uploader = LogUploader(s3, BUCKET, KEY, log, interval=60)  # driven by hand: no timing in this test
    log.note("job ext-job (extension, cp311), mode docker")
    assert uploader.upload() and not uploader.upload(), "uploads only when the log grew"
    assert s3.head_object(Bucket=BUCKET, Key=KEY)["Metadata"] == LOG_PARTIAL

    printed, notes = [], []
    assert show_log(farm(s3, Executions()), RUN, JOB, False, 0, printed.append, notes.append) == EXIT_OK
    assert "".join(printed) == log.path.read_text() and "still building" in notes[0]

    # Between two polls of --follow the build writes on (a line that is not ASCII among them).
    steps: list[Callable[[], object]] = [
        lambda: (log.write("[1/2] c++ -c ops.cpp -o ops.o   é ü"), uploader.upload()),
        lambda: (log.write("[2/2] c++ -shared ops.o -o ops.so"), uploader.upload()),
        lambda: (log.note("stage build: succeeded in 41.0s"), final_upload(uploader, log, s3)),
    ]
    printed.clear()

    def write(text: str) -> None:
        printed.append(text)
        if text and steps:
            steps.pop(0)()

    assert show_log(farm(s3, Executions()), RUN, JOB, True, 0, write, notes.append) == EXIT_OK
    assert not steps, "followed to the final upload"
    assert "".join(printed) == log.path.read_text(encoding="utf-8")
    assert len([p for p in printed if p]) == 4, "the first read, then only each step's new bytes"
    assert s3.head_object(Bucket=BUCKET, Key=KEY).get("Metadata", {}) == {}, "the final upload is untagged"


def test_follow_stops_when_the_job_ended_before_its_final_upload_and_restarts_with_a_new_attempt(
    s3: Any, tmp_path: Path
) -> None:
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"attempt 1, a long first line\n", Metadata=LOG_PARTIAL)
    executions = Executions()
    printed: list[str] = []
    notes: list[str] = []

    def write(text: str) -> None:
        printed.append(text)
        if len(printed) == 1:  # a spot relaunch: the new runner's log is shorter than what was read
            s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"attempt 2\n", Metadata=LOG_PARTIAL)
        elif text.startswith("attempt 2"):
            executions.status = "ABORTED"  # then the instance is gone with the log still partial

    assert show_log(farm(s3, executions), RUN, JOB, True, 0, write, notes.append) == EXIT_OK
    assert "".join(printed) == (
        "attempt 1, a long first line\n\n[wheelfoundry] build.log began again (a new attempt)\nattempt 2\n"
    )
    assert "ended before its final log upload" in notes[-1]


def test_follow_goes_on_past_a_spot_interrupted_attempt_to_the_next_attempts_final_log(s3: Any) -> None:
    # The runner's last upload of an interrupted attempt is complete but tagged (runner.finish); the next
    # attempt's log is longer than it by the time the follower looks again, so only the ETag tells.
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"attempt 1\nspot notice\n", Metadata=LOG_INTERRUPTED)
    printed: list[str] = []
    notes: list[str] = []
    attempt2 = b"attempt 2 on a new instance, a longer log than the first\n"

    def note(text: str) -> None:
        notes.append(text)
        if "waiting for the next" in text:  # the state machine relaunches; its runner uploads, then ends
            s3.put_object(Bucket=BUCKET, Key=KEY, Body=attempt2, Metadata=LOG_PARTIAL)

    def write(text: str) -> None:
        printed.append(text)
        if text == attempt2.decode():
            s3.put_object(Bucket=BUCKET, Key=KEY, Body=attempt2 + b"done\n")  # its final, untagged upload

    assert show_log(farm(s3, Executions()), RUN, JOB, True, 0, write, note) == EXIT_OK
    assert "".join(printed) == (
        "attempt 1\nspot notice\n\n[wheelfoundry] build.log began again (a new attempt)\n"
        + attempt2.decode()
        + "done\n"
    )
    # Without --follow the interrupted log is shown as it is, and the note says what happened.
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"attempt 1\n", Metadata=LOG_INTERRUPTED)
    notes.clear()
    assert show_log(farm(s3, Executions()), RUN, JOB, False, 0, printed.append, notes.append) == EXIT_OK
    assert "was interrupted (spot)" in notes[-1]


class SlowS3:
    """put_object that takes a while (and fails when told), to see what overlaps with it."""

    def __init__(self) -> None:
        self.puts: list[dict[str, Any]] = []
        self.in_put = threading.Event()
        self.active = False
        self.fail = False
        self.calls = 0  # put_object calls begun

    def put_object(self, **params: Any) -> None:
        self.calls += 1
        self.active = True
        self.in_put.set()
        time.sleep(0.2)
        self.active = False
        if self.fail:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "PutObject")
        self.puts.append(params)


def test_stopping_waits_for_an_upload_in_flight_and_failures_are_noted_once(tmp_path: Path) -> None:
    log, s3 = BuildLog(tmp_path / "build.log"), SlowS3()
    uploader = LogUploader(s3, BUCKET, KEY, log, interval=0.01)
    s3.fail = True
    log.write("line 1")
    uploader.start()
    deadline = time.monotonic() + 30
    while s3.calls < 3 and time.monotonic() < deadline:  # the uploader's one thread: a third put begins only
        time.sleep(0.01)  # after it handled the second failure, however slow this host is
    assert s3.calls >= 3, f"{s3.calls} uploads in 30 s"
    assert sum("live build.log upload failed" in line for line in log.tail) == 1
    s3.fail = False
    log.write("line 2")
    s3.in_put.clear()
    assert s3.in_put.wait(5)
    uploader.stopped.set()  # while that put sleeps: set() returns only after it
    assert not s3.active and s3.puts
    assert s3.puts[-1]["Metadata"] == LOG_PARTIAL and s3.puts[-1]["Key"] == KEY
    assert s3.puts[-1]["Body"].startswith(b"line 1\n")
    done = len(s3.puts)
    log.write("line 3")
    time.sleep(0.1)
    assert len(s3.puts) == done, "no upload after stop: the final one is the last word"
    uploader.join(2)
    assert not uploader.is_alive()


@pytest.mark.parametrize(
    ("environ", "interval", "started"),
    [
        ({}, 30.0, True),
        ({"WF_LOG_UPLOAD_SECONDS": "5"}, 5.0, True),
        ({"WF_LOG_UPLOAD_SECONDS": "0"}, 0.0, False),
        ({"CODEBUILD_BUILD_ID": "wf:1"}, 0.0, False),  # CodeBuild: CloudWatch is the live log
    ],
)
def test_upload_interval_from_the_environment(
    tmp_path: Path, environ: dict[str, str], interval: float, started: bool
) -> None:
    uploader = start_log_uploads(SlowS3(), BUCKET, KEY, BuildLog(tmp_path / "build.log"), environ)
    uploader.stopped.set()
    assert (uploader.interval, uploader.ident is not None) == (interval, started)
