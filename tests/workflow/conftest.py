"""The shipped template deployed into the embedded AWS, and helpers to run requests through it."""

from __future__ import annotations

import hashlib
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_local.demo import pack_source
from wheelfoundry_local.session import ExecutionResult
from wheelfoundry_local.testing import assert_no_builds, assert_no_instances, aws, embedded_aws  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "fixtures" / "tiny_ext"
ALL_STATES = ("pending", "running", "shutting-down", "terminated", "stopping", "stopped")


@pytest.fixture
def parameters() -> dict[str, Any]:
    return {"BuildHeartbeatSeconds": "60"}


@pytest.fixture
def stack(aws: EmbeddedAws, parameters: dict[str, Any]) -> Iterator[DeployedStack]:  # noqa: F811
    aws.registration.delay = 0.0
    yield aws.deploy(ROOT / "template.yaml", parameters)
    # The rule: after every test, nothing pending or running in the emulator.
    assert_no_instances(aws)
    assert_no_builds(aws)


def source(tmp_path: Path, change: dict[str, str] | None = None) -> Path:
    """A copy of the tiny extension, with some files replaced (a broken or slow variant)."""
    folder = tmp_path / "src-tiny"
    shutil.copytree(TINY, folder, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    for name, text in (change or {}).items():
        (folder / name).write_text(text)
    return folder


def upload(aws: EmbeddedAws, stack: DeployedStack, folder: Path, name: str = "wf-tiny-ext") -> str:  # noqa: F811
    body = pack_source(folder, name)
    bucket = stack.outputs["WheelBucketName"]
    key = f"sources/{name}-{hashlib.sha256(body).hexdigest()[:12]}.tar.gz"
    aws.client("s3").put_object(Bucket=bucket, Key=key, Body=body)
    return f"s3://{bucket}/{key}"


def extension_request(uri: str, **overrides: Any) -> dict[str, Any]:
    request = {
        "framework": "extension",
        "name": "wf-tiny-ext",
        "source": {"s3": uri},
        "torch": ["2.13"],
        "cuda": ["cpu"],
        "python": ["3.11"],
        "torch_index": "pip",
        "channel": "ci",
        # These tests follow the EC2 path (instances launched and terminated); test_codebuild*.py the other.
        "options": {"executor": "ec2"},
    }
    return {**request, **overrides}


def run(aws: EmbeddedAws, stack: DeployedStack, request: Any, timeout: float = 600) -> ExecutionResult:  # noqa: F811
    return aws.wait_execution(aws.start_execution(stack.state_machine_arn, request), timeout=timeout)


def launched_by(aws: EmbeddedAws, execution_arn: str, tests: bool = False) -> list[dict[str, Any]]:  # noqa: F811
    """The run's instances: its build jobs' (``tests``: its test jobs' too, which test the published bytes)."""
    mine = [i for i in aws.instances(states=ALL_STATES) if i["Tags"].get("wheelfoundry:execution") == execution_arn]
    return [i for i in mine if tests or "-test-cp" not in i["Tags"].get("wheelfoundry:job", "")]


def s3_json(aws: EmbeddedAws, stack: DeployedStack, key: str) -> Any:  # noqa: F811
    import json

    body = aws.client("s3").get_object(Bucket=stack.outputs["WheelBucketName"], Key=key)["Body"].read()
    return json.loads(body)


def s3_keys(aws: EmbeddedAws, stack: DeployedStack, prefix: str) -> list[str]:  # noqa: F811
    listing = aws.client("s3").list_objects_v2(Bucket=stack.outputs["WheelBucketName"], Prefix=prefix)
    return [o["Key"] for o in listing.get("Contents", [])]


def wait_for(predicate: Any, timeout: float = 120, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what or predicate}")


def explained(aws: EmbeddedAws, stack: DeployedStack, result: ExecutionResult) -> str:  # noqa: F811
    """A failed run as `wheelfoundry status` explains it: per failed job the stage, the cause lines, the log."""
    import json

    from wheelfoundry_user.failures import render, run_failures

    bucket = stack.outputs["WheelBucketName"]

    def get_json(key: str) -> Any:
        try:
            return json.loads(aws.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
        except Exception:  # absent, as the CLI's reader returns it
            return None

    run_id = result.arn.rsplit(":", 1)[1]
    return "\n".join(render(run_failures(get_json, run_id), bucket)) or f"{result.error}: {result.cause}"


@contextmanager
def served(root: Path) -> Iterator[str]:
    """``root`` laid out by URL (<host>/<path>, a page as index.json when PEP 691 JSON is asked for, else
    index.html: `wheelfoundry local watch --record`'s layout), served as http://127.0.0.1:<port>/<host>/..."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?")[0].lstrip("/")
            if path.endswith("/"):
                path += "index.json" if "pypi.simple" in self.headers.get("Accept", "") else "index.html"
            target = (root / path).resolve()
            if root.resolve() not in target.parents or not target.is_file():
                self.send_error(404)
                return
            data = target.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
