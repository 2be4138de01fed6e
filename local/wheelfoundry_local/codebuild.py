"""A local CodeBuild: runs each StartBuild's buildspec on this host, as the SSM agent stand-in does
for Run Command.

The buildspec (buildspecOverride, else the project's inline one) is parsed; `install`, `pre_build`,
`build` and `post_build` run in order, each command as `bash` in its own process group, in
`<state dir>/codebuild/<build>/src` (CODEBUILD_SRC_DIR), with the buildspec's `env.variables`,
then the project's environment, then this host's settings (WF_CONTAINER=none, a shared
WF_CACHE_DIR and a tools Python, as the local agent sets them), then StartBuild's overrides. A
failed install or pre_build ends the build unless `on-failure: CONTINUE`; a failed build phase
still runs post_build (CODEBUILD_BUILD_SUCCEEDING=0), as on CodeBuild. The build's timeout is
enforced (TIMED_OUT), StopBuild kills the process group (STOPPED). Status, phases and logs are
what BatchGetBuilds returns (the log also goes to the project's CloudWatch Logs group when the
build ends); `CodeBuild Build State Change` events (IN_PROGRESS and the final
status) reach the stack's rules.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from . import codebuild_api, instance_roles
from ._moto import ACCOUNT_ID, Patches
from .agent import INSTANCE_NICE
from .codebuild_api import FINAL, Build
from .events import EventDelivery

PHASES = ("install", "pre_build", "build", "post_build")


class LocalCodeBuild:
    def __init__(self, region: str, state_dir: Path, environment: dict[str, str], events: EventDelivery) -> None:
        self.region = region
        self.state_dir = state_dir
        self.environment = environment
        self.events = events
        self.seconds_per_minute = 60.0  # tests shorten CodeBuild's minutes (timeouts) with this
        self._builds: dict[str, Build] = {}
        self._idempotency: dict[str, str] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._patches = Patches()
        self._closing = False

    # -- lifecycle ------------------------------------------------------------------------------
    def install(self) -> None:
        codebuild_api.install(self._patches, self.start, self.describe, self.stop_build, self.list_ids)

    def uninstall(self) -> None:
        self._patches.undo()

    def builds(self, status: str | None = None) -> list[Build]:
        with self._lock:
            return [b for b in self._builds.values() if status is None or b.status == status]

    def log_text(self, build_id: str) -> str:
        build = self._builds[build_id]
        return build.log_path.read_text(encoding="utf-8") if build.log_path.exists() else ""

    def wait_idle(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def stop(self) -> None:
        """Kill whatever still runs and forget every build (a reset account); no more events."""
        self._closing = True
        for build in self.builds():
            build.stop_requested = True
            self._kill(build)
        self.wait_idle(15)
        with self._lock:
            self._threads.clear()
            self._builds.clear()
            self._idempotency.clear()
        self._closing = False
        self.seconds_per_minute = 60.0

    # -- the API --------------------------------------------------------------------------------
    def start(self, region: str, project_name: str, request: dict[str, Any]) -> dict[str, Any]:
        token = request.get("idempotencyToken")
        with self._lock:
            if token and token in self._idempotency:
                return self._describe_one(self._builds[self._idempotency[token]])
        project = codebuild_api.codebuild_backend(region).codebuild_projects[project_name].project_metadata
        environment = {k: v for k, v in project["environment"].items() if k != "environmentVariables"}
        role = request.get("serviceRoleOverride") or project.get("serviceRole", "")
        if request.get("computeTypeOverride"):
            environment["computeType"] = request["computeTypeOverride"]
        variables = {v["name"]: v for v in project["environment"].get("environmentVariables") or []}
        variables |= {v["name"]: v for v in request.get("environmentVariablesOverride") or []}
        build_id = f"{project_name}:{uuid.uuid4()}"
        root = self.state_dir / "codebuild" / build_id.replace(":", "-")
        buildspec = request.get("buildspecOverride") or project["source"].get("buildspec") or ""
        with self._lock:
            number = 1 + sum(b.project == project_name for b in self._builds.values())
            build = Build(
                id=build_id,
                arn=f"arn:aws:codebuild:{region}:{ACCOUNT_ID}:build/{build_id}",
                project=project_name,
                number=number,
                region=region,
                environment=environment,
                variables=[
                    {"name": k, "value": str(v.get("value", "")), "type": v.get("type", "PLAINTEXT")}
                    for k, v in variables.items()
                ],
                buildspec=buildspec,
                timeout_minutes=int(request.get("timeoutInMinutesOverride") or project.get("timeoutInMinutes") or 60),
                root=root,
                log_path=root / "build.log",
                service_role=role,
            )
            logs = (project.get("logsConfig") or {}).get("cloudWatchLogs") or {}
            build.log_group = logs.get("groupName") or f"/aws/codebuild/{project_name}"
            build.log_stream = "/".join(p for p in (logs.get("streamName"), build_id.split(":", 1)[1]) if p)
            self._builds[build_id] = build
            if token:
                self._idempotency[token] = build_id
            build.phases.append(self._phase("SUBMITTED", "SUCCEEDED"))
            thread = threading.Thread(target=self._run, args=(build,), daemon=True, name=f"wf-codebuild-{number}")
            self._threads.append(thread)
        thread.start()
        return self._describe_one(build)

    def describe(self, ids: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
        found, missing = [], []
        for build_id in ids:
            build = self._find(build_id)
            if build is None:
                missing.append(build_id)
            else:
                found.append(self._describe_one(build))
        return found, missing

    def stop_build(self, build_id: str) -> dict[str, Any] | None:
        build = self._find(build_id)
        if build is None:
            return None
        if build.status == "IN_PROGRESS":
            build.stop_requested = True
            self._kill(build)
        return self._describe_one(build)

    def list_ids(self, project_name: str) -> list[str]:
        with self._lock:
            found = [b for b in self._builds.values() if b.project == project_name]
        return [b.id for b in sorted(found, key=lambda b: b.number, reverse=True)]

    def _find(self, build_id: str) -> Build | None:
        key = build_id.split(":build/", 1)[-1]
        with self._lock:
            return self._builds.get(key)

    def _describe_one(self, build: Build) -> dict[str, Any]:
        logs = {"groupName": build.log_group, "streamName": build.log_stream, "deepLink": build.log_path.as_uri()}
        return build.describe(logs)

    def _ship_logs(self, build: Build) -> None:
        """The build's log into its CloudWatch Logs stream (at the end, not live), as CodeBuild keeps it."""
        import boto3

        lines = build.log_path.read_text(encoding="utf-8", errors="replace").splitlines() or ["(no output)"]
        logs = boto3.client("logs", endpoint_url=self.environment["AWS_ENDPOINT_URL"], region_name=build.region)
        now = int(time.time() * 1000)
        try:
            logs.create_log_stream(logGroupName=build.log_group, logStreamName=build.log_stream)
            for start_at in range(0, len(lines), 5000):
                batch = [{"timestamp": now, "message": line or " "} for line in lines[start_at : start_at + 5000]]
                logs.put_log_events(logGroupName=build.log_group, logStreamName=build.log_stream, logEvents=batch)
        except Exception:  # no such group (a project without one): the file and deepLink still have it
            logging.getLogger(__name__).debug("no CloudWatch Logs copy of %s", build.id, exc_info=True)

    # -- running a build ----------------------------------------------------------------------------
    @staticmethod
    def _phase(kind: str, status: str | None = None) -> dict[str, Any]:
        now = time.time()
        phase: dict[str, Any] = {"phaseType": kind, "startTime": now}
        if status is not None:
            phase |= {"phaseStatus": status, "endTime": now, "durationInSeconds": 0}
        return phase

    def _enter(self, build: Build, kind: str) -> dict[str, Any]:
        phase = self._phase(kind)
        build.phases.append(phase)
        build.current_phase = kind
        return phase

    @staticmethod
    def _leave(phase: dict[str, Any], status: str, message: str = "") -> None:
        now = time.time()
        phase |= {"phaseStatus": status, "endTime": now, "durationInSeconds": int(now - phase["startTime"])}
        if message:
            phase["contexts"] = [{"statusCode": status, "message": message}]

    def _run(self, build: Build) -> None:
        self._event(build)
        build.root.mkdir(parents=True, exist_ok=True)
        with build.log_path.open("a", encoding="utf-8") as log:
            for kind in ("QUEUED", "PROVISIONING", "DOWNLOAD_SOURCE"):
                self._leave(self._enter(build, kind), "SUCCEEDED")
            try:
                spec = yaml.safe_load(build.buildspec) or {}
                env = self._env(build, spec)
                status = self._phases(build, spec, env, log)
            except Exception as exc:  # a buildspec that cannot run: CLIENT_ERROR in DOWNLOAD_SOURCE on AWS
                log.write(f"[Container] buildspec error: {type(exc).__name__}: {exc}\n")
                status = "FAILED"
            for kind in ("UPLOAD_ARTIFACTS", "FINALIZING"):
                self._leave(self._enter(build, kind), "SUCCEEDED")
            log.write(f"[Container] Phase complete: build {status}\n")
        if not self._closing:
            self._ship_logs(build)
        build.current_phase = "COMPLETED"
        build.phases.append(self._phase("COMPLETED"))
        build.ended = time.time()
        build.status = status
        self._event(build)

    def _env(self, build: Build, spec: dict[str, Any]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SSM_", "MOTO_", "WF_", "CODEBUILD_"))}
        env |= {k: str(v) for k, v in ((spec.get("env") or {}).get("variables") or {}).items()}
        env |= self.environment
        host = {
            "WF_CONTAINER": "none",  # no Docker here: the stages run on this host, as with the local agent
            "WF_TOOLS_PYTHON": sys.executable,  # boto3 and the repair tools, instead of a pip install
            "WF_CACHE_DIR": os.environ.get("WF_CACHE_DIR") or str(self.state_dir / "cache"),
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
        env |= self._role_session(build)
        for folder in ("src", "tmp"):
            (build.root / folder).mkdir(parents=True, exist_ok=True)
        return env

    def _role_session(self, build: Build) -> dict[str, str]:
        """The build runs as its service role (instance_roles.py), never with the emulator's own keys."""
        import boto3

        endpoint = self.environment["AWS_ENDPOINT_URL"]
        iam, sts = (boto3.client(n, endpoint_url=endpoint, region_name=build.region) for n in ("iam", "sts"))
        if not build.service_role:
            raise LookupError("the project has no service role")
        session = "AWSCodeBuild-" + build.id.split(":", 1)[1]  # as CodeBuild names its role sessions
        return instance_roles.service_role_environment(iam, sts, build.service_role, session)

    def _phases(self, build: Build, spec: dict[str, Any], env: dict[str, str], log: Any) -> str:
        deadline = build.started + build.timeout_minutes * self.seconds_per_minute
        phases = spec.get("phases") or {}
        status, skip = "SUCCEEDED", False
        for name in PHASES:
            body = phases.get(name) or {}
            phase = self._enter(build, name.upper())
            if skip or not body:
                self._leave(phase, "SUCCEEDED")
                continue
            outcome = "SUCCEEDED"
            for command in [*(body.get("commands") or []), *(body.get("finally") or [])]:
                outcome = self._command(build, str(command), env, log, deadline)
                if outcome != "SUCCEEDED":
                    break
            self._leave(phase, outcome, "" if outcome == "SUCCEEDED" else f"Error while executing command in {name}")
            if outcome in ("TIMED_OUT", "STOPPED"):
                return outcome
            if outcome != "SUCCEEDED":
                status = "FAILED"
                env["CODEBUILD_BUILD_SUCCEEDING"] = "0"
                # install / pre_build abort the build; a failed build phase still runs post_build.
                skip = name in ("install", "pre_build") and body.get("on-failure", "ABORT") != "CONTINUE"
        return status

    def _command(self, build: Build, command: str, env: dict[str, str], log: Any, deadline: float) -> str:
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
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        build.pid = process.pid
        verdict = None
        while process.poll() is None:
            if build.stop_requested:
                verdict = "STOPPED"
            elif time.time() > deadline:
                verdict = "TIMED_OUT"
            if verdict is not None:
                self._kill(build)
                break
            time.sleep(0.05)
        process.wait()
        build.pid = None
        if verdict is None and build.stop_requested:  # StopBuild killed it between two polls
            verdict = "STOPPED"
        if verdict is None:
            verdict = "SUCCEEDED" if process.returncode == 0 else "FAILED"
        if verdict != "SUCCEEDED":
            log.write(f"[Container] Command did not exit successfully ({process.returncode}): {verdict}\n")
        log.flush()
        return verdict

    @staticmethod
    def _kill(build: Build) -> None:
        if build.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(build.pid, signal.SIGKILL)

    def _event(self, build: Build) -> None:
        if self._closing:
            return
        detail = codebuild_api.state_change_detail(build, build.status in FINAL)
        try:
            self.events.put("aws.codebuild", "CodeBuild Build State Change", detail, [build.arn])
        except Exception:  # best effort, as on AWS
            logging.getLogger(__name__).exception("delivering the CodeBuild state event failed")
