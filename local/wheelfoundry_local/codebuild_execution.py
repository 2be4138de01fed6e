"""Running one local CodeBuild build's buildspec (wheelfoundry_local.codebuild's LocalCodeBuild drives it):
its phases in order, each command as ``bash`` in its own process group, the environment CodeBuild would
give it (the buildspec's, the project's, this host's, StartBuild's overrides, the service role's session),
its timeout and StopBuild."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import IO, Any

from . import instance_roles
from .agent import INSTANCE_NICE, Output
from .codebuild_api import Build

PHASES = ("install", "pre_build", "build", "post_build")


def phase(kind: str, status: str | None = None) -> dict[str, Any]:
    now = time.time()
    phase: dict[str, Any] = {"phaseType": kind, "startTime": now}
    if status is not None:
        phase |= {"phaseStatus": status, "endTime": now, "durationInSeconds": 0}
    return phase


def enter(build: Build, kind: str) -> dict[str, Any]:
    started = phase(kind)
    build.phases.append(started)
    build.current_phase = kind
    return started


def leave(phase: dict[str, Any], status: str, message: str = "") -> None:
    now = time.time()
    phase |= {"phaseStatus": status, "endTime": now, "durationInSeconds": int(now - phase["startTime"])}
    if message:
        phase["contexts"] = [{"statusCode": status, "message": message}]


def build_env(build: Build, spec: dict[str, Any], environment: dict[str, str], state_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SSM_", "MOTO_", "WF_", "CODEBUILD_"))}
    env |= {k: str(v) for k, v in ((spec.get("env") or {}).get("variables") or {}).items()}
    env |= environment
    host = {
        "WF_CONTAINER": "none",  # no Docker here: the stages run on this host, as with the local agent
        "WF_TOOLS_PYTHON": sys.executable,  # boto3 and the repair tools, instead of a pip install
        "WF_CACHE_DIR": os.environ.get("WF_CACHE_DIR") or str(state_dir / "cache"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
        "TMPDIR": str(build.root / "tmp"),
    }
    env |= host
    env |= {v["name"]: v["value"] for v in build.variables}  # the project's, then StartBuild's, win
    # Over the project's docker: stages and images on this host, unless the Docker test bed is up
    # (WF_LOCAL_CONTAINER=docker, tests/container/): then in its images, pushing manifests only.
    env["WF_CONTAINER"] = os.environ.get("WF_LOCAL_CONTAINER") or "none"
    if env["WF_CONTAINER"] == "docker":
        env["WF_ECR_PUSH"] = "manifest"  # moto's ECR has no layer upload
        for name in ("WF_BUILDER_IMAGE", "WF_RUNTIME_BASE_IMAGE"):
            if os.environ.get(name):
                env[name] = os.environ[name]
    env |= {
        "CODEBUILD_BUILD_ID": build.id,
        "CODEBUILD_BUILD_ARN": build.arn,
        "CODEBUILD_BUILD_NUMBER": str(build.number),
        "CODEBUILD_INITIATOR": "wheelfoundry_local",
        "CODEBUILD_SRC_DIR": str(build.root / "src"),
        "CODEBUILD_BUILD_SUCCEEDING": "1",
    }
    env |= role_session(build, environment["AWS_ENDPOINT_URL"])
    for folder in ("src", "tmp"):
        (build.root / folder).mkdir(parents=True, exist_ok=True)
    return env


def role_session(build: Build, endpoint: str) -> dict[str, str]:
    """The build runs as its service role (instance_roles.py), never with the emulator's own keys."""
    import boto3

    iam, sts = (boto3.client(n, endpoint_url=endpoint, region_name=build.region) for n in ("iam", "sts"))
    if not build.service_role:
        raise LookupError("the project has no service role")
    session = "AWSCodeBuild-" + build.id.split(":", 1)[1]  # as CodeBuild names its role sessions
    return instance_roles.service_role_environment(iam, sts, build.service_role, session)


def run_phases(
    build: Build,
    spec: dict[str, Any],
    env: dict[str, str],
    log: Any,
    seconds_per_minute: float,
    output: Output | None = None,
) -> str:
    deadline = build.started + build.timeout_minutes * seconds_per_minute
    phases = spec.get("phases") or {}
    status, skip = "SUCCEEDED", False
    for name in PHASES:
        body = phases.get(name) or {}
        current = enter(build, name.upper())
        if skip or not body:
            leave(current, "SUCCEEDED")
            continue
        outcome = "SUCCEEDED"
        for command in [*(body.get("commands") or []), *(body.get("finally") or [])]:
            outcome = run_command(build, str(command), env, log, deadline, output)
            if outcome != "SUCCEEDED":
                break
        leave(current, outcome, "" if outcome == "SUCCEEDED" else f"Error while executing command in {name}")
        if outcome in ("TIMED_OUT", "STOPPED"):
            return outcome
        if outcome != "SUCCEEDED":
            status = "FAILED"
            env["CODEBUILD_BUILD_SUCCEEDING"] = "0"
            # install / pre_build abort the build; a failed build phase still runs post_build.
            skip = name in ("install", "pre_build") and body.get("on-failure", "ABORT") != "CONTINUE"
    return status


def run_command(
    build: Build, command: str, env: dict[str, str], log: Any, deadline: float, output: Output | None = None
) -> str:
    if build.stop_requested:
        return "STOPPED"
    first = command.strip().splitlines()[0] if command.strip() else ""
    log.write(f"[Container] {time.strftime('%Y/%m/%d %H:%M:%S')} Running command {first}\n")
    log.flush()
    script = build.root / f"command-{len(build.phases)}-{uuid.uuid4().hex[:8]}.sh"
    script.write_text(command + "\n", encoding="utf-8")
    process = subprocess.Popen(
        [*INSTANCE_NICE, "bash", str(script)],  # below the embedded AWS, as agent.py's commands
        cwd=env["CODEBUILD_SRC_DIR"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    build.pid = process.pid
    pump = threading.Thread(target=_pump, args=(process.stdout, log, build.id, output), daemon=True)
    pump.start()
    verdict = None
    while process.poll() is None:
        if build.stop_requested:
            verdict = "STOPPED"
        elif time.time() > deadline:
            verdict = "TIMED_OUT"
        if verdict is not None:
            kill(build)
            break
        time.sleep(0.05)
    process.wait()
    pump.join(5)  # the rest of its output (a killed group's pipe closes with it)
    build.pid = None
    if verdict is None and build.stop_requested:  # StopBuild killed it between two polls
        verdict = "STOPPED"
    if verdict is None:
        verdict = "SUCCEEDED" if process.returncode == 0 else "FAILED"
    if verdict != "SUCCEEDED":
        log.write(f"[Container] Command did not exit successfully ({process.returncode}): {verdict}\n")
    log.flush()
    return verdict


def _pump(stream: IO[str], log: Any, build_id: str, output: Output | None) -> None:
    """The command's output into the build's log and, line by line, to ``output`` (as the agent's)."""
    for line in stream:
        log.write(line)
        log.flush()
        if output is not None:
            output(build_id, "", line.rstrip("\n"))


def kill(build: Build) -> None:
    if build.pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(build.pid, signal.SIGKILL)
