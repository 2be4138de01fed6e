"""The deployed stack as the user's commands see it: outputs, runs, the bucket's objects."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import tomllib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from wheelfoundry_user import AwsProblem, NotFound

DEFAULT_STACK = "wheelfoundry"
RUN_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")


def default_stack(cwd: Path | None = None) -> str:
    """$WHEELFOUNDRY_STACK, else samconfig.toml's stack_name (what `sam deploy` used), else wheelfoundry."""
    if os.environ.get("WHEELFOUNDRY_STACK"):
        return os.environ["WHEELFOUNDRY_STACK"]
    path = (cwd or Path.cwd()) / "samconfig.toml"
    try:
        config = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return DEFAULT_STACK
    for section in ("global", "deploy"):
        name = config.get("default", {}).get(section, {}).get("parameters", {}).get("stack_name")
        if isinstance(name, str) and name:
            return name
    return DEFAULT_STACK


def aws_problem(exc: Exception) -> AwsProblem:
    return AwsProblem(f"AWS refused or could not be reached: {exc}")


@dataclass
class Farm:
    stack: str
    endpoint_url: str | None = None
    region: str | None = None
    _clients: dict[str, Any] = field(default_factory=dict)
    _outputs: dict[str, str] | None = None
    _session: Any = field(default=None, init=False, repr=False, compare=False)

    def client(self, service: str) -> Any:
        import boto3

        if service not in self._clients:
            # one session for all of them: each new session reads botocore's endpoint data again (0.1 s)
            if self._session is None:
                self._session = boto3.session.Session(region_name=self.region)
            self._clients[service] = self._session.client(
                service, endpoint_url=self.endpoint_url or os.environ.get("WHEELFOUNDRY_ENDPOINT_URL") or None
            )
        return self._clients[service]

    # -- the stack ----------------------------------------------------------------------------
    @property
    def outputs(self) -> dict[str, str]:
        from botocore.exceptions import BotoCoreError, ClientError

        if self._outputs is None:
            try:
                stacks = self.client("cloudformation").describe_stacks(StackName=self.stack)["Stacks"]
            except ClientError as exc:
                if "does not exist" in str(exc):
                    raise NotFound(
                        f"no stack {self.stack!r} here (deploy it with `sam deploy`, or pass --stack / --endpoint-url)"
                    ) from None
                raise aws_problem(exc) from None
            except BotoCoreError as exc:
                raise aws_problem(exc) from None
            self._outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
            if "StateMachineArn" not in self._outputs:
                raise NotFound(f"stack {self.stack!r} has no StateMachineArn output: not a WheelFoundry stack")
        return self._outputs

    @property
    def state_machine_arn(self) -> str:
        return self.outputs["StateMachineArn"]

    @property
    def bucket(self) -> str:
        return self.outputs["WheelBucketName"]

    # -- runs ---------------------------------------------------------------------------------
    def execution_arn(self, run: str) -> str:
        if run.startswith("arn:"):
            return run
        if not RUN_NAME.fullmatch(run):
            raise NotFound(f"{run!r} is not a run name (letters, digits, - and _)")
        return self.state_machine_arn.replace(":stateMachine:", ":execution:", 1) + ":" + run

    def describe(self, run: str) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        arn = self.execution_arn(run)
        try:
            described: dict[str, Any] = self.client("stepfunctions").describe_execution(executionArn=arn)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("ExecutionDoesNotExist", "InvalidArn", "ResourceNotFound"):
                raise NotFound(f"no run {run!r} in stack {self.stack!r} (`wheelfoundry runs` lists them)") from None
            raise aws_problem(exc) from None
        return described

    def validated(self, execution_arn: str, timeout: float) -> dict[str, Any] | None:
        """Wait for the run's Validate step (the stack's own checks: sources, pins, guardrails) to end.

        The execution's description once Validate has ended or the run has stopped; None while it is
        still validating after ``timeout`` seconds. A poll in the user's shell, never in a Lambda.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        sfn, deadline = self.client("stepfunctions"), time.monotonic() + timeout
        try:
            while True:
                described: dict[str, Any] = sfn.describe_execution(executionArn=execution_arn)
                if described["status"] != "RUNNING":
                    return described
                events = sfn.get_execution_history(executionArn=execution_arn, maxResults=100)["events"]
                if any(e.get("stateExitedEventDetails", {}).get("name") == "Validate" for e in events):
                    return described
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.5)
        except (ClientError, BotoCoreError) as exc:
            raise aws_problem(exc) from None

    def executions(self, limit: int = 20) -> list[dict[str, Any]]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            sfn = self.client("stepfunctions")
            page = sfn.list_executions(stateMachineArn=self.state_machine_arn, maxResults=limit)
        except (ClientError, BotoCoreError) as exc:
            raise aws_problem(exc) from None
        items: list[dict[str, Any]] = page.get("executions", [])
        for item in items:
            item.setdefault("name", item["executionArn"].rsplit(":", 1)[-1])
        return sorted(items, key=lambda e: e.get("startDate") or datetime.min, reverse=True)

    # -- the bucket ---------------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        from botocore.exceptions import ClientError

        try:
            body: bytes = self.client("s3").get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None
            raise aws_problem(exc) from None
        return body

    def stream(self, key: str, into: IO[bytes]) -> tuple[str, int] | None:
        """Copy an object into a file; its sha256 and size, or None when it is not in the bucket."""
        from botocore.exceptions import ClientError

        try:
            body = self.client("s3").get_object(Bucket=self.bucket, Key=key)["Body"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None
            raise aws_problem(exc) from None
        digest, size = hashlib.sha256(), 0
        for chunk in iter(lambda: body.read(1 << 20), b""):
            digest.update(chunk)
            into.write(chunk)
            size += len(chunk)
        return digest.hexdigest(), size

    def get_json(self, key: str) -> Any:
        body = self.get(key)
        return None if body is None else json.loads(body)

    def keys(self, prefix: str, delimiter: str | None = None) -> list[str]:
        """Object keys under a prefix, or with a delimiter the 'folders' just below it."""
        s3, found = self.client("s3"), []
        kwargs = {"Bucket": self.bucket, "Prefix": prefix, **({"Delimiter": delimiter} if delimiter else {})}
        for page in s3.get_paginator("list_objects_v2").paginate(**kwargs):
            if delimiter:
                found += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
            else:
                found += [o["Key"] for o in page.get("Contents", [])]
        return found

    def instances(self, execution_arn: str) -> list[dict[str, Any]]:
        """EC2 instances tagged with the execution, any state."""
        ec2, found = self.client("ec2"), []
        filters = [{"Name": "tag:wheelfoundry:execution", "Values": [execution_arn]}]
        for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page["Reservations"]:
                for item in reservation["Instances"]:
                    item["Tags"] = {t["Key"]: t["Value"] for t in item.get("Tags", [])}
                    found.append(item)
        return found
