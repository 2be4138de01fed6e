"""What the SSM agent stand-in (wheelfoundry_local.agent) does around a command's script: one run's
record, the document's parameters and their ``{{ Name }}`` substitution, the instance role's session the
script runs with, and the output uploaded to S3 as Run Command's OutputS3BucketName asks."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from . import instance_roles


@dataclass
class CommandRun:
    command_id: str
    instance_id: str
    document_name: str
    log_path: Path
    status: str = "Pending"
    exit_code: int | None = None
    cancel: bool = False


def params_of(declared: dict[str, Any], given: dict[str, list[str]]) -> dict[str, str]:
    values = {}
    for name, spec in declared.items():
        chosen = given.get(name)
        if chosen is None and "default" in spec:
            default = spec["default"]
            chosen = default if isinstance(default, list) else [default]
        values[name] = ",".join(str(v) for v in (chosen or []))
    return values


def _literal(value: str) -> Callable[[re.Match[str]], str]:
    return lambda _match: value


def substitute(text: str, params: dict[str, str]) -> str:
    for name, value in params.items():
        # A function replacement: the value is pasted literally (no backslash-escape processing).
        text = re.sub(r"\{\{\s*" + re.escape(name) + r"\s*\}\}", _literal(value), text)
    return text


def instance_role(endpoint: str, region: str, instance_id: str) -> dict[str, str]:
    """A session of the instance's role for the command (instance_roles.py); none: the emulator's keys."""
    ec2, iam, sts = (boto3.client(n, endpoint_url=endpoint, region_name=region) for n in ("ec2", "iam", "sts"))
    role = instance_roles.instance_role_arn(ec2, iam, instance_id)
    return instance_roles.role_environment(sts, role, instance_id) if role else {}


def upload_output(endpoint: str, command: Any, run: CommandRun, stdout: str, stderr: str) -> None:
    bucket = command.output_s3_bucket_name
    if not bucket:
        return
    prefix = "/".join(p for p in (command.output_s3_key_prefix.strip("/"), run.command_id, run.instance_id) if p)
    s3 = boto3.client("s3", endpoint_url=endpoint)
    for name, text in (("stdout", stdout), ("stderr", stderr)):
        if text:
            s3.put_object(
                Bucket=bucket, Key=f"{prefix}/awsrunShellScript/0.awsrunShellScript/{name}", Body=text.encode()
            )
