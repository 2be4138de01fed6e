"""``wheelfoundry local up`` / ``local down``: the embedded AWS as a local account that stays up.

`up` starts the embedded AWS, deploys template.yaml (with the request's source bucket as its
ExtensionSourceBucket), uploads the example source to the S3 URI its
request names (so ``--input file://examples/requests/extension-demo.json`` works unchanged), prints
the endpoint, the stack outputs and ready-to-paste AWS CLI commands, and serves until Ctrl-C,
SIGTERM or `local down`. The local SSM agent and CodeBuild run builds in the background meanwhile.
`<state dir>/up.json` holds the pid, endpoint and outputs while it is up; `down` signals that pid.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

Print = Callable[[str], None]
STATE_FILE = "up.json"


class UpError(Exception):
    """`local up` or `local down` cannot do what was asked (the message says why)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_state(state_dir: Path) -> dict[str, Any] | None:
    """What a running `local up` wrote, or None when none is up (a stale file is ignored)."""
    path = state_dir / STATE_FILE
    try:
        state: dict[str, Any] = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return state if _alive(int(state.get("pid", 0))) else None


def source_location(request_path: Path) -> tuple[str, str]:
    """(bucket, key) of the request's source.s3 URI (UpError when it names none)."""
    uri = str(json.loads(request_path.read_text()).get("source", {}).get("s3", ""))
    if not uri.startswith("s3://") or "/" not in uri[5:]:
        raise UpError(f"{request_path}: source.s3 is not an s3:// URI ({uri!r})")
    bucket, key = uri[5:].split("/", 1)
    return bucket, key


def upload_to_request_uri(aws: Any, request_path: Path, source: Path) -> str:
    """A source folder (packed here) or an sdist ``.tar.gz`` (as it is) at the request's own source.s3 URI
    (its bucket created if needed), as ``local run --source`` takes them."""
    from .demo import source_bytes

    bucket, key = source_location(request_path)
    name = str(json.loads(request_path.read_text()).get("name", source.name))
    s3 = aws.client("s3")
    if bucket not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
        s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key=key, Body=source_bytes(source, name))
    return f"s3://{bucket}/{key}"


def banner(endpoint: str, region: str, outputs: dict[str, Any], request_path: Path, uploaded: str | None) -> list[str]:
    arn, bucket = outputs["StateMachineArn"], outputs["WheelBucketName"]
    aws = f"aws --endpoint-url {endpoint}"
    lines = [
        f"embedded AWS up at {endpoint} (region {region}); stack 'wheelfoundry' deployed",
        f"  StateMachineArn  {arn}",
        f"  WheelBucketName  {bucket}",
    ]
    if uploaded:
        lines.append(f"  example source   {uploaded}  (packed {request_path.name}'s source)")
    lines += [
        "",
        "in another shell (any credentials work; these keep real ones out of it):",
        f"  export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_DEFAULT_REGION={region}",
        f"  {aws} stepfunctions start-execution --state-machine-arn {arn} \\",
        f"      --input file://{_shown(request_path)}",
        f"  {aws} stepfunctions describe-execution --execution-arn <executionArn from above>",
        f"  {aws} s3 ls s3://{bucket}/wheels/ --recursive",
        f"  wheelfoundry status --endpoint-url {endpoint}   # or export WHEELFOUNDRY_ENDPOINT_URL={endpoint}",
        "",
        "Ctrl-C or `wheelfoundry local down` stops it (everything in it is gone then).",
    ]
    return lines


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path.resolve())


def run_up(
    root: Path,
    state_dir: Path,
    request_path: Path,
    source: Path | None,
    out: Print = print,
    poll: float = 1.0,
    public_channels: str = "",
) -> int:
    from contextlib import ExitStack

    from .demo import check_source
    from .edge import serving_edge
    from .session import EmbeddedAws

    if source is not None:  # before anything starts: a file that is no sdist would fail only in the build
        try:
            check_source(source)
        except ValueError as exc:
            raise UpError(str(exc)) from exc
    running = read_state(state_dir)
    if running is not None:
        raise UpError(f"already up (pid {running['pid']}, {running['endpoint']}); `wheelfoundry local down` first")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    state_path = state_dir / STATE_FILE
    try:
        with ExitStack() as scope:
            aws = scope.enter_context(EmbeddedAws(state_dir=state_dir))
            parameters = {"BuildHeartbeatSeconds": "120", "PublicChannels": public_channels}
            if source is not None:  # the request names its own bucket: the stack lets the builds read it
                parameters["ExtensionSourceBucket"] = source_location(request_path)[0]
            stack = aws.deploy(root / "template.yaml", parameters=parameters)
            uploaded = upload_to_request_uri(aws, request_path, source) if source is not None else None
            edge = scope.enter_context(serving_edge(aws, stack)) if public_channels else None
            state = {
                "pid": os.getpid(),
                "endpoint": aws.endpoint,
                "region": aws.region,
                "stack": stack.name,
                "outputs": stack.outputs,
                "edge": edge.url if edge is not None else None,
                "started_at": time.time(),
            }
            temporary = state_path.with_suffix(".tmp")
            temporary.write_text(json.dumps(state, indent=2, default=str))
            temporary.replace(state_path)
            for line in banner(aws.endpoint, aws.region, stack.outputs, request_path, uploaded):
                out(line)
            if edge is not None:  # anyone's URL on AWS, and where the local edge serves it
                public = stack.outputs["PublicIndexUrl"]
                out(f"public channels {public_channels}: {public}<channel>/")
                out(f"  served here, anonymously, by the local edge: {edge.local(public)}<channel>/")
            _serve(aws, stack.state_machine_arn, stop, out, poll)
            out("stopping: running executions are stopped, the embedded AWS is emptied")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        try:
            if json.loads(state_path.read_text()).get("pid") == os.getpid():
                state_path.unlink()
        except (FileNotFoundError, json.JSONDecodeError):
            pass
    return 0


def _serve(aws: Any, state_machine_arn: str, stop: threading.Event, out: Print, poll: float) -> None:
    """Serve until stopped; say when an execution starts and how it ends."""
    sfn = aws.client("stepfunctions")
    seen: dict[str, str] = {}
    while not stop.wait(poll):
        try:
            page = sfn.list_executions(stateMachineArn=state_machine_arn, maxResults=50)
        except Exception as exc:  # the server is ours; a failed poll must not end the session
            out(f"(could not list executions: {exc})")
            continue
        for item in page.get("executions", []):
            name, status = item.get("name") or item["executionArn"].rsplit(":", 1)[-1], item["status"]
            if seen.get(name) != status:
                seen[name] = status
                out(f"execution {name}: {status}")


def run_down(state_dir: Path, out: Print = print, timeout: float = 60.0) -> int:
    state = read_state(state_dir)
    if state is None:
        raise UpError(f"nothing is up (no live {state_dir / STATE_FILE})")
    pid = int(state["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and (state_dir / STATE_FILE).exists():
        if time.monotonic() > deadline:
            raise UpError(f"pid {pid} did not stop within {timeout:.0f}s")
        time.sleep(0.2)
    out(f"stopped the embedded AWS at {state['endpoint']} (pid {pid})")
    return 0
