"""EmbeddedAws: the one object tests, the demo and the CLI use.

    with EmbeddedAws(state_dir=tmp) as aws:
        stack = aws.deploy("template.yaml", parameters={"Stage": "local"})
        arn = aws.start_execution(stack.state_machine_arn, {"framework": "extension", ...})
        result = aws.wait_execution(arn, timeout=300)
        assert result.status == "SUCCEEDED", result
        assert aws.instances() == []

Only one EmbeddedAws can be active per process: moto's backends, the patches and MOTO_PORT are
process-wide.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar

import boto3

from . import cfn_models, cli_compat, kms, moto_pace, public_layers, public_parameters
from ._moto import DEFAULT_REGION, Patches, install_sfn_fixes, sfn_backend, utcnow, wake_stopped
from .agent import Output, SsmAgent
from .codebuild import LocalCodeBuild
from .deploy import DeployedStack, deploy
from .ec2_quotas import Ec2Quotas
from .events import EventDelivery, ExecutionWatcher
from .lambdas import FaultRegistry, InvocationLog, LambdaRuntime
from .server import MotoServer
from .ssm_ext import Registration


@dataclass(frozen=True)
class ExecutionResult:
    arn: str
    status: str  # SUCCEEDED | FAILED | TIMED_OUT | ABORTED
    input: Any
    output: Any  # parsed JSON (None unless SUCCEEDED)
    error: str | None
    cause: str | None

    @property
    def succeeded(self) -> bool:
        return self.status == "SUCCEEDED"


class EmbeddedAws:
    _active: ClassVar[EmbeddedAws | None] = None

    def __init__(
        self,
        state_dir: str | Path | None = None,
        *,
        region: str = DEFAULT_REGION,
        registration_delay: float = 0.0,
        agent_output: Output | None = None,
        enforce_lambda_timeouts: bool = True,
    ) -> None:
        """state_dir: where instance work roots and command logs go (default ./.wf-local).
        registration_delay: seconds after launch before an instance's agent counts as Online. 0: Online once
            its instance runs (this host has no boot to wait out: a job's first SendCommand goes through);
            more plays a booting agent, which the ASL's AgentNotReady retry waits for (its 10 s interval).
        agent_output: called with (instance id, command id, line) for each line a command prints, and with
        (build id, "", line) for each line a local CodeBuild build prints.
        enforce_lambda_timeouts: report a handler that ran past its Timeout as Sandbox.Timedout."""
        self.region = region
        self.state_dir = Path(state_dir) if state_dir is not None else Path.cwd() / ".wf-local"
        self.server = MotoServer(region)
        self.runtime = LambdaRuntime(enforce_timeouts=enforce_lambda_timeouts)
        self.events = EventDelivery(self.runtime, region, self._start_execution_json)
        self.watcher = ExecutionWatcher(self.events)
        self.registration = Registration(registration_delay)
        self.quotas = Ec2Quotas()  # EC2 vCPU quotas: Service Quotas' values, enforced by RunInstances
        self._agent_output = agent_output
        self.agent: SsmAgent | None = None
        self.codebuild: LocalCodeBuild | None = None
        self._patches = Patches()

    # -- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> EmbeddedAws:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        if EmbeddedAws._active is not None:
            raise RuntimeError("another EmbeddedAws is active in this process")
        EmbeddedAws._active = self
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            self.server.start()
            self.runtime.install()
            install_sfn_fixes(self._patches)
            moto_pace.install(self._patches)
            cfn_models.install(self._patches, self.runtime)
            public_layers.install(self._patches)
            public_parameters.install(self._patches)
            cli_compat.install(self._patches)
            kms.install(self._patches)
            self.quotas.install(self._patches)
            self.events.install()
            self.agent = SsmAgent(
                self.region,
                self.state_dir,
                self.server.environment(),
                self.events,
                self.registration,
                self._agent_output,
            )
            self.agent.install()
            self.codebuild = LocalCodeBuild(
                self.region, self.state_dir, self.server.environment(), self.events, self._agent_output
            )
            self.codebuild.install()
            self.watcher.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if EmbeddedAws._active is not self:
            return
        self.watcher.stop()
        self._stop_executions()
        if self.agent is not None:
            self.agent.stop()
            self.agent.uninstall()
            self.agent = None
        if self.codebuild is not None:
            self.codebuild.stop()
            self.codebuild.uninstall()
            self.codebuild = None
        self.events.uninstall()
        cfn_models.uninstall()
        self._patches.undo()
        self.runtime.uninstall()
        self.server.stop()
        EmbeddedAws._active = None

    def reset(self) -> None:
        """Back to an empty account: executions stopped, commands killed, moto emptied, logs cleared."""
        self._stop_executions()
        if self.agent is not None:
            self.agent.stop()
        if self.codebuild is not None:
            self.codebuild.stop()
        self.server.reset()
        self.watcher.forget()
        self.runtime.faults.clear()
        self.runtime.invocations.clear()
        self.events.clear()
        self.quotas.reset()

    def _stop_executions(self) -> None:
        # An execution left running keeps calling handlers from its own thread, into the next test.
        for machine in list(sfn_backend(self.region).state_machines):
            for execution in list(getattr(machine, "executions", [])):
                if execution.exec_status is not None and execution.exec_status.value == "RUNNING":
                    execution.stop(stop_date=utcnow(), error="wheelfoundry_local.Reset", cause="EmbeddedAws stopped")
                    wake_stopped(execution)

    # -- handles -------------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    @property
    def faults(self) -> FaultRegistry:
        return self.runtime.faults

    @property
    def invocations(self) -> InvocationLog:
        return self.runtime.invocations

    def client(self, service: str) -> Any:
        return boto3.client(service, region_name=self.region, endpoint_url=self.endpoint)

    # -- deploy and run ---------------------------------------------------------------------------
    def deploy(
        self, template: str | Path, parameters: dict[str, Any] | None = None, *, stack_name: str = "wheelfoundry"
    ) -> DeployedStack:
        return deploy(self.runtime, template, region=self.region, parameters=parameters, stack_name=stack_name)

    def start_execution(self, state_machine_arn: str, input: Any = None, name: str | None = None) -> str:
        """Start an execution; input is any JSON-serialisable value (default {})."""
        return self._start_execution_json(state_machine_arn, json.dumps({} if input is None else input), name)

    def _start_execution_json(self, state_machine_arn: str, input_json: str, name: str | None) -> str:
        response = self.client("stepfunctions").start_execution(
            stateMachineArn=state_machine_arn, input=input_json, name=name or str(uuid.uuid4())
        )
        return str(response["executionArn"])

    def wait_execution(self, execution_arn: str, timeout: float = 60.0) -> ExecutionResult:
        """Wait until the execution is no longer RUNNING; TimeoutError (with its last events) otherwise."""
        sfn = self.client("stepfunctions")
        deadline = time.monotonic() + timeout
        pause = 0.05
        while True:
            described = sfn.describe_execution(executionArn=execution_arn)
            if described["status"] != "RUNNING":
                break
            if time.monotonic() > deadline:
                events = sfn.get_execution_history(executionArn=execution_arn, reverseOrder=True, maxResults=5)
                last = [e["type"] for e in events["events"]]
                raise TimeoutError(f"{execution_arn} still RUNNING after {timeout}s; last events {last}")
            # Each look is an API call the embedded AWS serves under the GIL its executions need (about
            # 8 ms of CPU): 20 a second for a whole run took a sixth of a core; a run's end is seen
            # within 0.5 s.
            time.sleep(pause)
            pause = min(0.5, pause * 1.5)
        return ExecutionResult(
            arn=execution_arn,
            status=described["status"],
            input=json.loads(described.get("input") or "null"),
            output=json.loads(described["output"]) if described.get("output") else None,
            error=described.get("error"),
            cause=described.get("cause"),
        )

    def history(self, execution_arn: str) -> list[dict[str, Any]]:
        """The execution's full event history (for debugging and assertions)."""
        sfn = self.client("stepfunctions")
        events: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"executionArn": execution_arn}
        while True:
            page = sfn.get_execution_history(**kwargs)
            events += page["events"]
            if not page.get("nextToken"):
                return events
            kwargs["nextToken"] = page["nextToken"]

    def builds_in_progress(self) -> list[dict[str, Any]]:
        """CodeBuild builds still IN_PROGRESS, as BatchGetBuilds items."""
        if self.codebuild is None:
            return []
        ids = [b.id for b in self.codebuild.builds("IN_PROGRESS")]
        return list(self.client("codebuild").batch_get_builds(ids=ids)["builds"]) if ids else []

    def instances(self, states: tuple[str, ...] = ("pending", "running")) -> list[dict[str, Any]]:
        """EC2 instances in the given states, as DescribeInstances items with Tags as a dict."""
        ec2 = self.client("ec2")
        found = []
        for page in ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "instance-state-name", "Values": list(states)}]
        ):
            for reservation in page["Reservations"]:
                for item in reservation["Instances"]:
                    item["Tags"] = {t["Key"]: t["Value"] for t in item.get("Tags", [])}
                    found.append(item)
        return found
