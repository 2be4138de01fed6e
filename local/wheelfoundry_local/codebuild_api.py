"""What moto's CodeBuild lacks for the CodeBuild executor: a CloudFormation model for
AWS::CodeBuild::Project, and StartBuild / BatchGetBuilds / StopBuild / ListBuildsForProject that
reach a build that really runs (codebuild.py) instead of moto's records, which say SUCCEEDED as
soon as anyone looks. Also the build record (`Build`) and its state-change event's detail.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._moto import ACCOUNT_ID, Patches
from .cfn_services import CustomResourceFailed, Model

FINAL = ("SUCCEEDED", "FAILED", "FAULT", "TIMED_OUT", "STOPPED")
COMPUTE_TYPES = (
    "BUILD_GENERAL1_SMALL",
    "BUILD_GENERAL1_MEDIUM",
    "BUILD_GENERAL1_LARGE",
    "BUILD_GENERAL1_XLARGE",
    "BUILD_GENERAL1_2XLARGE",
)


def codebuild_backend(region: str) -> Any:
    from moto.codebuild.models import codebuild_backends

    return codebuild_backends[ACCOUNT_ID][region]


def _lower(props: Any) -> Any:
    """CloudFormation's PascalCase properties as the API's camelCase (BuildSpec -> buildspec)."""
    if isinstance(props, list):
        return [_lower(v) for v in props]
    if not isinstance(props, dict):
        return props
    out = {}
    for key, value in props.items():
        name = "buildspec" if key == "BuildSpec" else key[:1].lower() + key[1:]
        out[name] = _lower(value)
    return out


class CodeBuildProject(Model):
    """AWS::CodeBuild::Project: a project in moto's CodeBuild backend; Ref is its name."""

    def __init__(self, region: str, name: str, arn: str) -> None:
        self.region = region
        self.physical_id = name
        self.arn = arn

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::CodeBuild::Project"

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> CodeBuildProject:
        p = cloudformation_json["Properties"]
        name = p.get("Name") or resource_name[:150]
        environment = _lower(p["Environment"])
        if environment.get("computeType") not in COMPUTE_TYPES:
            raise CustomResourceFailed(f"{kwargs.get('LogicalId')}: compute type {environment.get('computeType')!r}")
        metadata = codebuild_backend(region_name).create_project(
            project_name=name,
            description=p.get("Description"),
            project_source=_lower(p["Source"]),
            artifacts=_lower(p["Artifacts"]),
            environment=environment,
            service_role=p["ServiceRole"],
            tags=[{"key": t["Key"], "value": t["Value"]} for t in p.get("Tags", [])],
            cache=_lower(p.get("Cache")),
            timeout=int(p.get("TimeoutInMinutes") or 60),
            queued_timeout=int(p.get("QueuedTimeoutInMinutes") or 480),
            source_version=p.get("SourceVersion"),
            logs_config=_lower(p.get("LogsConfig")),
            vpc_config=_lower(p.get("VpcConfig")),
        )
        return cls(region_name, name, metadata["arn"])

    def get_cfn_attribute(self, attribute_name: str) -> Any:
        if attribute_name == "Arn":
            return self.arn
        raise CustomResourceFailed(f"Project has no attribute {attribute_name}")

    def delete(self, account_id: str, region: str) -> None:
        codebuild_backend(region).delete_project(self.physical_id)


Start = Callable[[str, str, dict[str, Any]], dict[str, Any]]  # (region, project name, request) -> build
Describe = Callable[[list[str]], tuple[list[dict[str, Any]], list[str]]]  # ids -> (builds, not found)
Stop = Callable[[str], dict[str, Any] | None]  # id -> build (None: unknown)
ListIds = Callable[[str], list[str]]  # project -> build ids, newest first


def _error(code: str, message: str) -> Exception:
    from moto.codebuild.exceptions import InvalidInputException, ResourceNotFoundException

    kinds = {"InvalidInputException": InvalidInputException, "ResourceNotFoundException": ResourceNotFoundException}
    return kinds[code](message)


def install(patches: Patches, start: Start, describe: Describe, stop: Stop, list_ids: ListIds) -> None:
    from moto.cloudformation.parsing import get_model_map  # noqa: F401  (moto's models loaded first)
    from moto.codebuild.responses import CodeBuildResponse

    from . import cfn_models

    patches.set(
        cfn_models, "EMULATED", {**cfn_models.EMULATED, CodeBuildProject.cloudformation_type(): CodeBuildProject}
    )

    def start_build(self: Any) -> str:
        name = self._get_param("projectName")
        if name not in codebuild_backend(self.region).codebuild_projects:
            raise _error("ResourceNotFoundException", f"Project cannot be found: {name}")
        request = {k: v for k, v in json.loads(self.body or "{}").items() if k != "projectName"}
        timeout = request.get("timeoutInMinutesOverride")
        if timeout is not None and not 5 <= int(timeout) <= 2160:
            raise _error("InvalidInputException", f"timeoutInMinutesOverride {timeout} is not in [5, 2160]")
        compute = request.get("computeTypeOverride")
        if compute is not None and compute not in COMPUTE_TYPES:
            raise _error("InvalidInputException", f"Invalid compute type provided: {compute}")
        return json.dumps({"build": start(self.region, name, request)})

    def batch_get_builds(self: Any) -> str:
        builds, missing = describe(list(self._get_param("ids") or []))
        return json.dumps({"builds": builds, "buildsNotFound": missing})

    def stop_build(self: Any) -> str:
        build = stop(self._get_param("id"))
        if build is None:
            raise _error("ResourceNotFoundException", f"Build {self._get_param('id')} does not exist")
        return json.dumps({"build": build})

    def list_builds_for_project(self: Any) -> str:
        name = self._get_param("projectName")
        if name not in codebuild_backend(self.region).codebuild_projects:
            raise _error("ResourceNotFoundException", f"The provided project {name} does not exist")
        ids = list_ids(name)
        if self._get_param("sortOrder") == "ASCENDING":
            ids.reverse()
        return json.dumps({"ids": ids})

    patches.set(CodeBuildResponse, "start_build", start_build)
    patches.set(CodeBuildResponse, "batch_get_builds", batch_get_builds)
    patches.set(CodeBuildResponse, "stop_build", stop_build)
    patches.set(CodeBuildResponse, "list_builds_for_project", list_builds_for_project)


def state_change_detail(build: Build, complete: bool) -> dict[str, Any]:
    """The `detail` of a `CodeBuild Build State Change` event, as CodeBuild emits it."""
    return {
        "build-status": build.status,
        "project-name": build.project,
        "build-id": build.arn,
        "current-phase": build.current_phase,
        "current-phase-context": "[]",
        "version": "1",
        "additional-information": {
            "build-complete": complete,
            "initiator": "wheelfoundry_local",
            "timeout-in-minutes": build.timeout_minutes,
            "environment": {
                "image": build.environment.get("image", ""),
                "privileged-mode": bool(build.environment.get("privilegedMode")),
                "compute-type": build.environment.get("computeType", ""),
                "type": build.environment.get("type", ""),
                "environment-variables": [dict(v) for v in build.variables],
            },
            "phases": [
                {
                    "phase-type": p["phaseType"],
                    "phase-status": p.get("phaseStatus"),
                    "phase-context": [{"message": c["message"]} for c in p.get("contexts", [])],
                }
                for p in build.phases
            ],
        },
    }


@dataclass
class Build:
    id: str
    arn: str
    project: str
    number: int
    region: str
    environment: dict[str, Any]  # the project's, with the overrides applied
    variables: list[dict[str, str]]  # every variable the build sees from project + StartBuild
    buildspec: str
    timeout_minutes: int
    root: Path
    log_path: Path
    started: float = field(default_factory=time.time)
    ended: float | None = None
    status: str = "IN_PROGRESS"
    current_phase: str = "SUBMITTED"
    phases: list[dict[str, Any]] = field(default_factory=list)
    stop_requested: bool = False
    pid: int | None = None
    service_role: str = ""
    log_group: str = ""
    log_stream: str = ""

    def describe(self, logs: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": self.id,
            "arn": self.arn,
            "buildNumber": self.number,
            "startTime": self.started,
            **({"endTime": self.ended} if self.ended is not None else {}),
            "currentPhase": self.current_phase,
            "buildStatus": self.status,
            "projectName": self.project,
            "phases": [dict(p) for p in self.phases],
            "source": {"type": "NO_SOURCE", "buildspec": self.buildspec},
            "artifacts": {"location": ""},
            "environment": {**self.environment, "environmentVariables": list(self.variables)},
            "logs": logs,
            "timeoutInMinutes": self.timeout_minutes,
            "buildComplete": self.status in FINAL,
            "initiator": "wheelfoundry_local",
            "serviceRole": self.service_role,
        }
