"""CodeBuild executor: start a job's build, stop it, find it again, and fail its task token.

The Build state for a CodeBuild job is ``lambda:invoke.waitForTaskToken`` on StartBuild (this
module's ``start``). The task token never appears in the build's environment or logs: it is stored
at ``<job prefix>token`` (SSE-S3, private bucket) and the build gets only that key (WF_TOKEN_KEY);
the runner reads it from S3 (docs/contracts.md §6). ``<job prefix>build.json`` names the build, so
StopBuild, the reaper and a retried start find it; every build also carries WF_EXECUTION and
WF_JOB_ID, so a build whose build.json was never written is still found.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from wheelfoundry.errors import WheelFoundryError

BUILDSPEC_IN_BUNDLE = "codebuild/build.yml"
MIN_MINUTES, MAX_MINUTES = 5, 2160  # timeoutInMinutesOverride's range
COMPUTE_TYPES = {
    "BUILD_GENERAL1_SMALL",
    "BUILD_GENERAL1_MEDIUM",
    "BUILD_GENERAL1_LARGE",
    "BUILD_GENERAL1_XLARGE",
    "BUILD_GENERAL1_2XLARGE",
}
TOKEN_KEY = re.compile(r"^runs/[A-Za-z0-9_-]{1,80}/jobs/[A-Za-z0-9._-]{1,160}/token$")
GONE = {"TaskTimedOut", "TaskDoesNotExist", "InvalidToken"}  # the task already ended
LIVE = "IN_PROGRESS"
SCAN = 100  # newest builds per project the reaper looks at (BatchGetBuilds takes 100 ids)
CAUSE_LIMIT = 32000


class BuildStartFailed(WheelFoundryError):
    """StartBuild was refused, or the job cannot be built on CodeBuild as planned."""


@dataclass(frozen=True)
class BuildSettings:
    bucket: str
    projects: Mapping[str, str]  # platform -> CodeBuild project name
    extension_role: str = ""  # serviceRoleOverride for extension jobs (a user's setup.py: docs/security.md)
    # RuntimeImageProject (wheelfoundry.aws.image_builds): never a job's project, but its builds carry
    # the same WF_TOKEN_KEY / WF_EXECUTION, so the state-change callback and the reaper cover it too.
    image_project: str = ""

    @property
    def stack_projects(self) -> tuple[str, ...]:
        """Every CodeBuild project of this stack whose builds a task token waits on."""
        return (*self.projects.values(), *([self.image_project] if self.image_project else []))


def _key_of(s3: Any, bucket: str, key: str) -> bytes | None:
    try:
        body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
            return None
        raise
    return body


def read_build_record(s3: Any, bucket: str, prefix: str) -> dict[str, Any] | None:
    body = _key_of(s3, bucket, f"{prefix}build.json")
    return json.loads(body) if body else None


def buildspec_from_bundle(s3: Any, bucket: str, bundle_key: str) -> str:
    """The run's own buildspec: the same bundle version as the runner it starts."""
    body = _key_of(s3, bucket, bundle_key)
    if body is None:
        raise BuildStartFailed(f"s3://{bucket}/{bundle_key} (the run's build bundle) does not exist")
    try:
        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            return archive.read(BUILDSPEC_IN_BUNDLE).decode("utf-8")
    except (KeyError, zipfile.BadZipFile) as exc:
        raise BuildStartFailed(f"s3://{bucket}/{bundle_key} has no {BUILDSPEC_IN_BUNDLE}: {exc}") from exc


def timeout_minutes(max_seconds: int) -> int:
    return min(MAX_MINUTES, max(MIN_MINUTES, math.ceil(max_seconds / 60)))


def _env(values: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": v, "type": "PLAINTEXT"} for k, v in values.items()]


def start(event: Mapping[str, Any], s3: Any, codebuild: Any, settings: BuildSettings) -> dict[str, Any]:
    """Store the token, start the build (or find the one this attempt already started), record it."""
    job, run, execution, config = event["job"], event["run"], event["execution"], event["config"]
    token = str(event.get("token") or "")
    if not token:
        raise BuildStartFailed("no task token: the state must be lambda:invoke.waitForTaskToken")
    if run["bucket"] != settings.bucket:
        raise BuildStartFailed(f"bucket {run['bucket']!r} is not this stack's")
    project = settings.projects.get(job["platform"])
    if not project:
        raise BuildStartFailed(f"no CodeBuild project for platform {job['platform']!r}")
    bucket, prefix = settings.bucket, job["prefix"]
    token_sha = hashlib.sha256(token.encode()).hexdigest()
    earlier = read_build_record(s3, bucket, prefix)
    if earlier and earlier.get("token_sha256") == token_sha:  # a retried invocation of this attempt
        return {"build_id": earlier["build_id"], "project": earlier["project"], "reused": True}
    if earlier:  # an earlier attempt's token is dead: its build would only run into that
        stop_builds(codebuild, [earlier["build_id"]])
    contract = json.loads(_key_of(s3, bucket, job["job_key"]) or b"{}")
    compute = contract.get("compute_type")
    if compute is not None and compute not in COMPUTE_TYPES:
        raise BuildStartFailed(f"{job['id']}: compute type {compute!r} is not one of {sorted(COMPUTE_TYPES)}")
    s3.put_object(
        Bucket=bucket,
        Key=f"{prefix}token",
        Body=token.encode(),
        ServerSideEncryption="AES256",
        ContentType="text/plain",
    )
    params: dict[str, Any] = {
        "projectName": project,
        "buildspecOverride": buildspec_from_bundle(s3, bucket, run["bundle_key"]),
        "timeoutInMinutesOverride": timeout_minutes(int(job["max_seconds"])),
        "idempotencyToken": hashlib.sha256(f"{execution}|{job['id']}|{token_sha}".encode()).hexdigest(),
        "environmentVariablesOverride": _env(
            {
                "WF_BUCKET": bucket,
                "WF_JOB_KEY": job["job_key"],
                "WF_BUNDLE_KEY": run["bundle_key"],
                "WF_TOKEN_KEY": f"{prefix}token",
                "WF_HEARTBEAT_SECONDS": str(config["runner_heartbeat_seconds"]),
                "WF_EXECUTION": execution,
                "WF_JOB_ID": job["id"],
            }
        ),
    }
    if compute:
        params["computeTypeOverride"] = compute
    # A test job installs and runs the extension's code: the extension's trust class, as its build.
    if contract.get("kind") in ("extension", "test") and settings.extension_role:
        params["serviceRoleOverride"] = settings.extension_role
    try:
        build = codebuild.start_build(**params)["build"]
    except ClientError as exc:
        raise BuildStartFailed(f"StartBuild for {job['id']} on {project}: {exc}") from exc
    record = {
        "build_id": build["id"],
        "project": project,
        "execution": execution,
        "job_id": job["id"],
        "token_sha256": token_sha,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    s3.put_object(Bucket=bucket, Key=f"{prefix}build.json", Body=json.dumps(record, indent=2).encode())
    return {"build_id": build["id"], "project": project, "reused": False}


def environment_of(build: Mapping[str, Any]) -> dict[str, str]:
    variables = build.get("environment", {}).get("environmentVariables", [])
    return {v["name"]: v.get("value", "") for v in variables}


def _batches(ids: list[str], size: int = 100) -> Iterable[list[str]]:
    for start_at in range(0, len(ids), size):
        yield ids[start_at : start_at + size]


def live_builds(codebuild: Any, projects: Iterable[str]) -> list[dict[str, Any]]:
    """IN_PROGRESS builds among the newest SCAN builds of each project."""
    found: list[dict[str, Any]] = []
    for project in projects:
        try:
            ids = codebuild.list_builds_for_project(projectName=project, sortOrder="DESCENDING")["ids"][:SCAN]
        except ClientError:
            continue
        for batch in _batches(ids):
            found += [b for b in codebuild.batch_get_builds(ids=batch)["builds"] if b.get("buildStatus") == LIVE]
    return found


def stop_builds(codebuild: Any, build_ids: list[str]) -> list[str]:
    """Stop those still running; a build that already ended or is unknown is left alone."""
    stopped = []
    for batch in _batches(build_ids):
        for build in codebuild.batch_get_builds(ids=batch).get("builds", []):
            if build.get("buildStatus") != LIVE:
                continue
            try:
                codebuild.stop_build(id=build["id"])
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in (
                    "ResourceNotFoundException",
                    "InvalidInputException",
                ):
                    raise
                continue
            stopped.append(build["id"])
    return stopped


def job_builds(s3: Any, codebuild: Any, settings: BuildSettings, job: Mapping[str, Any], execution: str) -> list[str]:
    """The job's builds: build.json, or (StartBuild returned but build.json was not written) a search."""
    record = read_build_record(s3, settings.bucket, job["prefix"])
    if record:
        return [str(record["build_id"])]
    return [
        b["id"]
        for b in live_builds(codebuild, settings.projects.values())
        if environment_of(b).get("WF_EXECUTION") == execution and environment_of(b).get("WF_JOB_ID") == job["id"]
    ]


def forget_token(s3: Any, bucket: str, prefix: str) -> None:
    """The task is over: nothing may call back with its token any more."""
    s3.delete_object(Bucket=bucket, Key=f"{prefix}token")


def _execution_status(sfn: Any, arn: str) -> str:
    try:
        return str(sfn.describe_execution(executionArn=arn)["status"])
    except ClientError:
        return "UNKNOWN"


def reap_builds(event: Mapping[str, Any], codebuild: Any, sfn: Any, projects: Iterable[str]) -> dict[str, Any]:
    """Stop builds of an execution that failed, timed out or was aborted; on the schedule, any build
    whose execution is no longer running."""
    detail = event.get("detail") or {}
    live = live_builds(codebuild, projects)
    if event.get("source") == "aws.states":
        execution = detail.get("executionArn", "")
        chosen = [b for b in live if environment_of(b).get("WF_EXECUTION") == execution]
    else:
        chosen = [b for b in live if _execution_status(sfn, environment_of(b).get("WF_EXECUTION", "")) != "RUNNING"]
    return {"stopped": stop_builds(codebuild, [b["id"] for b in chosen]), "builds_seen": len(live)}


def _failed_phase(detail: Mapping[str, Any]) -> str:
    phases = (detail.get("additional-information") or {}).get("phases") or []
    for phase in phases:
        if phase.get("phase-status") not in (None, "SUCCEEDED"):
            context = "; ".join(c.get("message", "") for c in phase.get("phase-context") or [] if c.get("message"))
            return (
                f" in phase {phase.get('phase-type')} ({phase.get('phase-status')}{': ' + context if context else ''})"
            )
    return ""


def on_build_state(
    detail: Mapping[str, Any], codebuild: Any, s3: Any, sfn: Any, settings: BuildSettings
) -> dict[str, Any]:
    """A build of this stack ended badly: fail its task token (when the runner could not)."""
    project, status = detail.get("project-name", ""), detail.get("build-status", "")
    build_id = str(detail.get("build-id", "")).split(":build/", 1)[-1]
    if project not in settings.stack_projects:
        return {"action": "ignored", "reason": f"{project!r} is not this stack's project"}
    listed = (detail.get("additional-information") or {}).get("environment", {}).get("environment-variables")
    if listed is not None:
        env = {v["name"]: v.get("value", "") for v in listed}
    else:
        builds = codebuild.batch_get_builds(ids=[build_id]).get("builds", [])
        env = environment_of(builds[0]) if builds else {}
    key = env.get("WF_TOKEN_KEY", "")
    if not TOKEN_KEY.match(key):
        return {"action": "ignored", "reason": f"build {build_id} names no task token key"}
    token = _key_of(s3, settings.bucket, key)
    if token is None:
        return {"action": "already-ended", "build": build_id, "status": status}
    cause = f"CodeBuild build {build_id} ended {status}{_failed_phase(detail)}"
    try:
        sfn.send_task_failure(taskToken=token.decode(), error="BuildFailed", cause=cause[:CAUSE_LIMIT])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in GONE:
            return {"action": "already-ended", "build": build_id, "status": status}
        raise
    return {"action": "failed-task", "build": build_id, "status": status}
