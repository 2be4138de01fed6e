"""Talking back: heartbeats, the spot-interruption watch, uploads and the final callback (contracts §4)."""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from wfbuild import hostfiles
from wfbuild.execute import BuildLog
from wfbuild.wheels import wheelfile

TOKEN_GONE = ("TaskTimedOut", "TaskDoesNotExist", "InvalidToken")
CAUSE_LIMIT = 32_000
IMDS_DEFAULT = "http://169.254.169.254"


class Heartbeat(threading.Thread):
    """SendTaskHeartbeat on start and then every ``interval`` seconds; ``on_gone`` when the token no longer
    exists."""

    def __init__(self, sfn: Any, token: str, interval: float, log: BuildLog, on_gone: Callable[[str], None]) -> None:
        super().__init__(name="wf-heartbeat", daemon=True)
        self.sfn, self.token, self.interval, self.log, self.on_gone = sfn, token, interval, log, on_gone
        self.stopped = threading.Event()

    def beat(self) -> bool:
        """One heartbeat; False when the token is gone (then nothing more is sent)."""
        try:
            self.sfn.send_task_heartbeat(taskToken=self.token)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in TOKEN_GONE:
                self.log.note(f"task token gone ({code}): stopping the build")
                self.on_gone(code)
                return False
            self.log.note(f"heartbeat failed ({code}); retrying next interval")
        except BotoCoreError as exc:
            self.log.note(f"heartbeat failed ({exc}); retrying next interval")
        return True

    def run(self) -> None:
        # The first beat goes at once: the Build state's heartbeat clock started at SendCommand, and the
        # time to here (agent pickup, the document's setup, the bundle, python's start) is already spent.
        if not self.beat():
            return
        while not self.stopped.wait(self.interval):
            if not self.beat():
                return


# User metadata of a build.log uploaded while the build runs; the final upload has none, so a
# reader (wheelfoundry logs --follow) knows the log is complete when the tag is gone.
LOG_PARTIAL = {"wf-log": "partial"}
# The final upload of an attempt a spot interruption ended: the state machine may launch another, whose
# log then replaces this one (`wheelfoundry logs --follow` keeps following).
LOG_INTERRUPTED = {"wf-log": "interrupted"}


class _StopAfterUpload(threading.Event):
    """An Event whose ``set`` waits for an upload in flight: none can then land after the final one."""

    def __init__(self, lock: threading.Lock) -> None:
        super().__init__()
        self._upload_lock = lock

    def set(self) -> None:
        with self._upload_lock:
            super().set()


class LogUploader(threading.Thread):
    """Puts build.log, as written so far, at its S3 key every ``interval`` seconds (when it grew).

    An EC2 job's only live log: CodeBuild streams to CloudWatch, the SSM agent keeps stdout to
    itself. Uploads are tagged ``LOG_PARTIAL``; the runner's final upload replaces the object.
    A failed upload is noted once and retried next interval; it never fails the build.
    """

    def __init__(self, s3: Any, bucket: str, key: str, log: BuildLog, interval: float) -> None:
        super().__init__(name="wf-log-upload", daemon=True)
        self.s3, self.bucket, self.key, self.log, self.interval = s3, bucket, key, log, interval
        self._lock = threading.Lock()
        self.stopped = _StopAfterUpload(self._lock)
        self._sent = 0  # bytes in the last upload; an empty log is not worth one
        self._warned = False

    def upload(self) -> bool:
        """One upload if the log grew since the last; False when it did not."""
        size = self.log.path.stat().st_size
        if size == self._sent:
            return False
        with self.log.path.open("rb") as handle:
            body = handle.read(size)  # what was written by now; lines still coming go next time
        self.s3.put_object(
            Bucket=self.bucket, Key=self.key, Body=body, ContentType="text/plain; charset=utf-8", Metadata=LOG_PARTIAL
        )
        self._sent = size
        return True

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            with self._lock:
                if self.stopped.is_set():
                    return
                try:
                    self.upload()
                except (ClientError, BotoCoreError, OSError) as exc:
                    if not self._warned:
                        self.log.note(f"live build.log upload failed ({exc}); retrying, the final upload stays")
                    self._warned = True


def start_log_uploads(s3: Any, bucket: str, key: str, log: BuildLog, environ: Mapping[str, str]) -> LogUploader:
    """A LogUploader every WF_LOG_UPLOAD_SECONDS (default 30), started unless that is 0 or this is
    CodeBuild (CODEBUILD_BUILD_ID set: its CloudWatch stream is live already, and the follower reads it)."""
    interval = 0.0 if environ.get("CODEBUILD_BUILD_ID") else float(environ.get("WF_LOG_UPLOAD_SECONDS") or 30)
    uploader = LogUploader(s3, bucket, key, log, interval)
    if uploader.interval > 0:
        uploader.start()
    return uploader


class SpotWatcher(threading.Thread):
    """Polls IMDSv2 ``spot/instance-action``; ``on_notice`` once a stop/terminate is scheduled.

    Off EC2 (no IMDS within a second) or on an on-demand instance it logs one line and ends.
    """

    def __init__(
        self, log: BuildLog, on_notice: Callable[[str], None], endpoint: str | None = None, interval: float = 5.0
    ) -> None:
        super().__init__(name="wf-spot-watch", daemon=True)
        self.log, self.on_notice, self.interval = log, on_notice, interval
        # botocore's own override of the IMDS address (tests and odd networks set it).
        self.endpoint = (endpoint or IMDS_DEFAULT).rstrip("/")
        self.stopped = threading.Event()
        self._token = ""

    def _request(self, path: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, str]:
        req = urllib.request.Request(f"{self.endpoint}{path}", method=method, headers=headers or {})  # noqa: S310
        try:
            with urllib.request.urlopen(req, timeout=1.0) as resp:  # noqa: S310 (fixed IMDS endpoint)
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, ""

    def _get(self, path: str) -> tuple[int, str]:
        status, body = self._request(path, headers={"X-aws-ec2-metadata-token": self._token})
        if status == 401:  # the session token expired: fetch another once
            self._token = self._request("/latest/api/token", "PUT", {"X-aws-ec2-metadata-token-ttl-seconds": "21600"})[
                1
            ]
            status, body = self._request(path, headers={"X-aws-ec2-metadata-token": self._token})
        return status, body

    def run(self) -> None:
        try:
            status, self._token = self._request(
                "/latest/api/token", "PUT", {"X-aws-ec2-metadata-token-ttl-seconds": "21600"}
            )
            lifecycle = self._get("/latest/meta-data/instance-life-cycle")[1] if status == 200 else ""
        except (OSError, urllib.error.URLError):
            status, lifecycle = 0, ""
        if status != 200:
            self.log.note("no instance metadata service: not watching for spot interruptions")
            return
        if lifecycle.strip() != "spot":
            self.log.note(f"instance life cycle is {lifecycle.strip() or 'unknown'}: no spot interruption watch")
            return
        while not self.stopped.wait(self.interval):
            try:
                status, body = self._get("/latest/meta-data/spot/instance-action")
            except (OSError, urllib.error.URLError):
                continue  # a transient IMDS hiccup: try again next interval
            if status == 200 and body:
                self.on_notice(body)
                return


WHEEL_NAME = re.compile(r"[A-Za-z0-9_.+!-]+\.whl")


def upload_wheels(s3: Any, bucket: str, prefix: str, work: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Uploads every smoke-tested wheel and its METADATA (PEP 658); returns the callback's wheel list."""
    out = []
    for entry in manifest["wheels"]:
        if entry["smoke"] != "passed":
            continue
        # The manifest and the files are the build's (docs/security.md §2): a wheel's name is a file
        # name, and its path a regular file in the job's folder, never a link to a host file.
        if not WHEEL_NAME.fullmatch(str(entry["name"])):
            raise hostfiles.UnsafeFile(f"{entry['name']!r} is not a wheel file name")
        key = f"{prefix}wheels/{entry['name']}"
        meta = {"sha256": entry["sha256"], "requires-python": entry["requires_python"]}
        with hostfiles.open_inside(work, work / entry["path"]) as handle:
            body = wheelfile.metadata_bytes(handle)
            handle.seek(0)
            s3.upload_fileobj(handle, bucket, key, ExtraArgs={"Metadata": meta, "ContentType": "application/zip"})
        s3.put_object(Bucket=bucket, Key=f"{key}.metadata", Body=body, ContentType="text/plain")
        out.append(
            {
                "filename": entry["name"],
                "key": key,
                "package": entry["package"],
                "version": entry["version"],
                "python": entry["python"],
                "sha256": entry["sha256"],
                "size": entry["size"],
                "requires_python": entry["requires_python"],
                "metadata_key": f"{key}.metadata",
                "cell": entry.get("cell"),
            }
        )
    return out


def success_output(job_id: str, manifest: dict[str, Any], keys: dict[str, str], wheels: list[dict[str, Any]]) -> str:
    failures = [{**f, "log_tail": (f.get("log_tail") or "")[-4000:]} for f in manifest["failures"]]
    return json.dumps(
        {
            "job_id": job_id,
            "status": manifest["status"],
            "manifest_key": keys["manifest"],
            "log_key": keys["log"],
            "wheels": wheels,
            "failures": failures,
            "missing_cells": manifest.get("missing_cells", []),
        }
    )


def failure_cause(job_id: str, stage: str, log_key: str, log_tail: str) -> str:
    """The cause JSON, cut from the front of the log tail until it fits in 32,000 characters."""
    tail = log_tail[-CAUSE_LIMIT:]
    while True:
        text = json.dumps({"job_id": job_id, "stage": stage, "log_key": log_key, "log_tail": tail})
        if len(text) <= CAUSE_LIMIT or not tail:
            return text
        # Each dropped character shortens the JSON by at least one (escapes make it more).
        tail = tail[len(text) - CAUSE_LIMIT :]
