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

import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from . import codebuild_api
from . import codebuild_execution as execution
from ._moto import ACCOUNT_ID, Patches
from .agent import Output
from .codebuild_api import FINAL, Build
from .events import EventDelivery


class LocalCodeBuild:
    def __init__(
        self,
        region: str,
        state_dir: Path,
        environment: dict[str, str],
        events: EventDelivery,
        output: Output | None = None,
    ) -> None:
        """output: called with (build id, "", line) for each line the build prints, as the agent's."""
        self.region = region
        self.output = output
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
            execution.kill(build)
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
            build.phases.append(execution.phase("SUBMITTED", "SUCCEEDED"))
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
            execution.kill(build)
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
    def _run(self, build: Build) -> None:
        self._event(build)
        build.root.mkdir(parents=True, exist_ok=True)
        with build.log_path.open("a", encoding="utf-8") as log:
            for kind in ("QUEUED", "PROVISIONING", "DOWNLOAD_SOURCE"):
                execution.leave(execution.enter(build, kind), "SUCCEEDED")
            try:
                spec = yaml.safe_load(build.buildspec) or {}
                env = execution.build_env(build, spec, self.environment, self.state_dir)
                status = execution.run_phases(build, spec, env, log, self.seconds_per_minute, self.output)
            except Exception as exc:  # a buildspec that cannot run: CLIENT_ERROR in DOWNLOAD_SOURCE on AWS
                log.write(f"[Container] buildspec error: {type(exc).__name__}: {exc}\n")
                status = "FAILED"
            for kind in ("UPLOAD_ARTIFACTS", "FINALIZING"):
                execution.leave(execution.enter(build, kind), "SUCCEEDED")
            log.write(f"[Container] Phase complete: build {status}\n")
        if not self._closing:
            self._ship_logs(build)
        build.current_phase = "COMPLETED"
        build.phases.append(execution.phase("COMPLETED"))
        build.ended = time.time()
        build.status = status
        self._event(build)

    def _event(self, build: Build) -> None:
        if self._closing:
            return
        detail = codebuild_api.state_change_detail(build, build.status in FINAL)
        try:
            self.events.put("aws.codebuild", "CodeBuild Build State Change", detail, [build.arn])
        except Exception:  # best effort, as on AWS
            logging.getLogger(__name__).exception("delivering the CodeBuild state event failed")
