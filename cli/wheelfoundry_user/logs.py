"""A job's build log: the build.log the runner uploads when it ends, or meanwhile (a CodeBuild job)
the build's CloudWatch Logs stream, followed until the build ends."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from wheelfoundry_user import EXIT_OK, NotFound, NotReady
from wheelfoundry_user.farm import Farm
from wheelfoundry_user.status import ENDED

Write = Callable[[str], Any]


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


def show_log(farm: Farm, run: str, job: str, follow: bool, interval: float, write: Write) -> int:
    described = farm.describe(run)
    name = described["name"]
    prefix = f"runs/{name}/jobs/{job}/"
    if farm.get(prefix + "job.json") is None:
        jobs = (farm.get_json(f"runs/{name}/plan.json") or {}).get("jobs", [])
        raise NotFound(f"no job {job!r} in run {name} (jobs: {', '.join(jobs) or 'none yet'})")
    token: str | None = None
    streamed = False
    while True:
        body = farm.get(prefix + "build.log")
        if body is not None:
            if not streamed:
                write(body.decode(errors="replace"))
            return EXIT_OK
        where = _cloudwatch(farm, prefix)
        if where is not None:
            lines, token = _events(farm, where, token)
            for line in lines:
                write(line + "\n")
            streamed = streamed or bool(lines)
        ended = farm.describe(name)["status"] in ENDED or farm.get(prefix + "result.json") is not None
        if not follow or ended:
            if streamed:
                return EXIT_OK
            raise NotReady(
                f"job {job} has no build.log yet: the runner uploads it when the build ends"
                + (" (it ended without one)" if ended else "; --follow waits for it")
            )
        time.sleep(interval)
