"""The build's own AWS credentials: a per-job session, never the host's (docs/security.md section 2).

The runner is this project's code and holds the class role (instance profile or CodeBuild service
role): it reads the job, fetches the source, uploads the outputs and calls back. The stages that run
the job's code (setup.py, a git ref's build scripts) get only a session of the class's job role,
minted here with ``sts:AssumeRole`` and a session policy naming this job's ``job.json`` and its
compiler-cache prefix. The session's rights are the intersection of the two, so a build can neither
write another job's outputs nor the other class's cache, read another job's token, push images nor
call back at all. A session from a role session is role chaining, capped at one hour: a thread
re-mints it well before that and rewrites the credentials file, which every new process (each
compiler launch, pip, cmake) reads afresh.

Fail closed: without a job role, or when AssumeRole fails, the stages get no credentials at all
(the compiler cache is then skipped, the build itself is unaffected).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

SESSION_SECONDS = 3600
# Every variable through which an SDK could find the host's identity, and the callback's capability.
SCRUBBED = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
    "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
    "WF_TASK_TOKEN", "WF_TOKEN_KEY",
)  # fmt: skip
_SESSION_NAME = re.compile(r"[^\w+=,.@-]")


def partition(region: str | None) -> str:
    region = region or ""
    return "aws-cn" if region.startswith("cn-") else "aws-us-gov" if region.startswith("us-gov-") else "aws"


def session_policy(bucket: str, prefix: str, cache_prefix: str, region: str | None = None) -> dict[str, Any]:
    """What the job's own code may do: read its job.json; read and write its compiler-cache prefix."""
    arn = f"arn:{partition(region)}:s3:::{bucket}"
    statements: list[dict[str, Any]] = [
        {"Sid": "OwnJobContract", "Effect": "Allow", "Action": "s3:GetObject", "Resource": f"{arn}/{prefix}job.json"}
    ]
    if cache_prefix:
        statements.append(
            {"Sid": "OwnCache", "Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject"],
             "Resource": f"{arn}/{cache_prefix}*"}
        )  # fmt: skip
        statements.append(
            {"Sid": "ListOwnCache", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": arn,
             "Condition": {"StringLike": {"s3:prefix": [f"{cache_prefix}*"]}}}
        )  # fmt: skip
    return {"Version": "2012-10-17", "Statement": statements}


def session_name(job_id: str) -> str:
    return _SESSION_NAME.sub("-", f"wf-{job_id}")[:64]


class JobCredentials:
    """Mints the job's session into ``path`` (an AWS shared-credentials file) and keeps it fresh."""

    def __init__(
        self,
        sts: Any,
        role_arn: str,
        job_id: str,
        policy: Mapping[str, Any],
        path: Path,
        note: Callable[[str], None],
        refresh_seconds: float = 2400.0,
    ) -> None:
        self.sts, self.role_arn, self.job_id, self.policy = sts, role_arn, job_id, dict(policy)
        self.path, self.note, self.refresh_seconds = path, note, refresh_seconds
        self.available = False
        self.stopped = threading.Event()

    def mint(self) -> bool:
        if not self.role_arn:
            self.note("no job role in job.json: the build's stages get no AWS credentials")
            return False
        try:
            creds = self.sts.assume_role(
                RoleArn=self.role_arn,
                RoleSessionName=session_name(self.job_id),
                Policy=json.dumps(self.policy, separators=(",", ":")),
                DurationSeconds=SESSION_SECONDS,
            )["Credentials"]
        except Exception as exc:  # fail closed: no credentials rather than the host's
            self.note(f"cannot mint the job session ({type(exc).__name__}: {exc}); stages get no AWS credentials")
            self.available = False
            return False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(
                "[default]\n"
                f"aws_access_key_id = {creds['AccessKeyId']}\n"
                f"aws_secret_access_key = {creds['SecretAccessKey']}\n"
                f"aws_session_token = {creds['SessionToken']}\n"
            )
        os.replace(tmp, self.path)  # a process reading it sees the old or the new file, never half
        self.available = True
        return True

    def start(self) -> None:
        """Mint now and then every ``refresh_seconds`` until ``stopped`` is set."""
        self.mint()
        if self.available:
            self.note(f"job session {session_name(self.job_id)} ({self.role_arn.rsplit('/', 1)[-1]})")

        def loop() -> None:
            while not self.stopped.wait(self.refresh_seconds):
                self.mint()

        threading.Thread(target=loop, name="job-credentials", daemon=True).start()

    def stage_env(self, environ: Mapping[str, str], path_in_stage: str) -> dict[str, str]:
        """``environ`` without any way to the host's identity, plus the job session's file."""
        env = {k: v for k, v in environ.items() if k not in SCRUBBED}
        # No IMDS fallback: on an instance the containers cannot reach it (hop limit 1), and in host
        # mode it must not be tried either.
        env["AWS_EC2_METADATA_DISABLED"] = "true"
        env["AWS_CONFIG_FILE"] = os.devnull
        env["AWS_SHARED_CREDENTIALS_FILE"] = path_in_stage if self.available else os.devnull
        return env
