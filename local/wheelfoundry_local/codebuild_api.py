"""What moto's CodeBuild lacks for the CodeBuild executor: a CloudFormation model for
AWS::CodeBuild::Project, and StartBuild / BatchGetBuilds / StopBuild / ListBuildsForProject that
reach a build that really runs (codebuild.py) instead of moto's records, which say SUCCEEDED as
soon as anyone looks.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ._moto import ACCOUNT_ID, Patches
from .cfn_services import CustomResourceFailed, Model

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
