"""A job's build log: build.log in S3, which the runner of an EC2 job re-uploads while it builds
(tagged partial, every WF_LOG_UPLOAD_SECONDS) and once more, complete, when it ends; meanwhile a
CodeBuild job's CloudWatch Logs stream. ``--follow`` prints only what is new until the log is
complete or the job has ended. An attempt a spot interruption ended uploads its log tagged
interrupted: the follower waits for the next attempt's log (a new ETag) and prints it from its start."""

from __future__ import annotations

import codecs
import sys
import time
from collections.abc import Callable
from typing import Any

from wheelfoundry_user import EXIT_OK, NotFound, NotReady
from wheelfoundry_user.farm import Farm, aws_problem
from wheelfoundry_user.status import ENDED

Write = Callable[[str], Any]
# The runner's tag on a build.log taken while the build runs, and on the last log of an attempt that
# a spot interruption ended (buildspecs/wfbuild/runner/callback.py LOG_PARTIAL, LOG_INTERRUPTED).
TAG, PARTIAL, INTERRUPTED = "wf-log", "partial", "interrupted"


def _cloudwatch(farm: Farm, prefix: str) -> tuple[str, str] | None:
    """(group, stream) of the job's CodeBuild build, when there is one."""
    build = farm.get_json(prefix + "build.json")
    if not build:
        return None
    try:
        builds = farm.client("codebuild").batch_get_builds(ids=[build["build_id"]]).get("builds", [])
    except Exception:  # no CodeBuild access: build.log in S3 remains
        return None
    logs = (builds[0].get("logs") or {}) if builds else {}
    if logs.get("groupName") and logs.get("streamName"):
        return str(logs["groupName"]), str(logs["streamName"])
    return None


def _events(farm: Farm, where: tuple[str, str], token: str | None) -> tuple[list[str], str | None]:
    kwargs: dict[str, Any] = {"logGroupName": where[0], "logStreamName": where[1], "startFromHead": True}
    if token:
        kwargs["nextToken"] = token
    try:
        page = farm.client("logs").get_log_events(**kwargs)
    except Exception:  # the stream appears when the build starts writing
        return [], token
    return [str(e.get("message", "")) for e in page.get("events", [])], page.get("nextForwardToken") or token


def _head(farm: Farm, key: str) -> tuple[int, str, str] | None:
    """(size, tag, ETag) of build.log (tag "" when final), None while there is none."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        head = farm.client("s3").head_object(Bucket=farm.bucket, Key=key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
            return None
        raise aws_problem(exc) from None
    except BotoCoreError as exc:
        raise aws_problem(exc) from None
    return int(head["ContentLength"]), str(head.get("Metadata", {}).get(TAG, "")), str(head.get("ETag", ""))


def _bytes_from(farm: Farm, key: str, offset: int) -> bytes:
    """build.log from byte ``offset`` on: a Range GET, so a follower reads each byte once."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        body: bytes = farm.client("s3").get_object(Bucket=farm.bucket, Key=key, Range=f"bytes={offset}-")["Body"].read()
    except (BotoCoreError, ClientError) as exc:
        raise aws_problem(exc) from None
    return body


def show_log(
    farm: Farm, run: str, job: str, follow: bool, interval: float, write: Write, note: Write | None = None
) -> int:
    note = note or sys.stderr.write
    described = farm.describe(run)
    name = described["name"]
    prefix = f"runs/{name}/jobs/{job}/"
    if farm.get(prefix + "job.json") is None:
        jobs = (farm.get_json(f"runs/{name}/plan.json") or {}).get("jobs", [])
        raise NotFound(f"no job {job!r} in run {name} (jobs: {', '.join(jobs) or 'none yet'})")
    key = prefix + "build.log"
    token: str | None = None
    streamed = False  # CloudWatch events printed (then S3's copy of the same lines is not)
    offset = 0  # bytes of build.log printed
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a read may end mid-character
    interrupted_etag = ""  # the ETag of an interrupted attempt's log: any other is the next attempt's
    while True:
        head = _head(farm, key)
        partial = head is not None and head[1] in (PARTIAL, INTERRUPTED)
        if head is not None and not streamed:
            size = head[0]
            next_attempt = bool(interrupted_etag) and head[2] != interrupted_etag
            if size < offset or next_attempt:  # a relaunched instance (spot) began the log again
                write(decoder.decode(b"", final=True) + "\n[wheelfoundry] build.log began again (a new attempt)\n")
                offset, interrupted_etag = 0, ""
            if size > offset:
                chunk = _bytes_from(farm, key, offset)
                offset += len(chunk)
                write(decoder.decode(chunk))
        if head is not None and not partial:  # the runner's final upload: the whole log
            write(decoder.decode(b"", final=True))
            gpu = farm.get(prefix + "gpu-test.log")  # options.gpu_test: the GPU host's log follows the build's
            if gpu is not None:
                write(f"\n[wheelfoundry] GPU test of {job} (gpu-test.log)\n" + gpu.decode("utf-8", "replace"))
            return EXIT_OK
        if head is not None and head[1] == INTERRUPTED and not interrupted_etag:
            interrupted_etag = head[2]
            note(f"[wheelfoundry] job {job}: a spot interruption ended this attempt; waiting for the next\n")
        if head is None or streamed:
            where = _cloudwatch(farm, prefix)
            if where is not None:
                lines, token = _events(farm, where, token)
                for line in lines:
                    write(line + "\n")
                streamed = streamed or bool(lines)
        ended = farm.describe(name)["status"] in ENDED or farm.get(prefix + "result.json") is not None
        if partial and (ended or not follow):
            write(decoder.decode(b"", final=True))
            if head is not None and head[1] == INTERRUPTED:
                state = "ended after a spot interruption" if ended else "was interrupted (spot); --follow waits"
                note(f"[wheelfoundry] job {job} {state}\n")
            elif ended:
                note(f"[wheelfoundry] job {job} ended before its final log upload: the log may stop short\n")
            else:
                note(f"[wheelfoundry] job {job} is still building: --follow prints the rest as it comes\n")
            return EXIT_OK
        if not follow or ended:
            if streamed:
                return EXIT_OK
            raise NotReady(
                f"job {job} has no build.log yet: its runner uploads it once the build has started"
                + (" (it ended without one)" if ended else "; --follow waits for it")
            )
        time.sleep(interval)
