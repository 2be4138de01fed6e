"""CloudFormation models for types whose service moto implements but whose CloudFormation model
is missing or incomplete; created by moto's ResourceMap through cfn_models.resource_class_from_type.

- AWS::Scheduler::Schedule / ScheduleGroup: moto has the API but no CloudFormation model.
- AWS::Lambda::Version / Alias: moto's Version has no physical id (Ref gave a Python object) and
  there is no Alias model.
- AWS::SSM::Document: moto's model, but with CloudFormation's defaults (JSON, a generated name).
"""

from __future__ import annotations

import functools
from typing import Any

from moto.core.common_models import CloudFormationModel

from ._moto import lambda_backend, scheduler_backend


class CustomResourceFailed(Exception):
    """A custom resource answered FAILED, raised, never answered, or lacks a requested attribute."""


class Model(CloudFormationModel):
    """Base of this package's models: a physical id, no name property."""

    physical_id = ""

    @staticmethod
    def cloudformation_name_type() -> str:
        return ""

    @property
    def physical_resource_id(self) -> str:
        return self.physical_id


class SchedulerSchedule(Model):
    def __init__(self, schedule: Any, region: str) -> None:
        self.schedule = schedule
        self.region = region
        self.physical_id = schedule.name

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::Scheduler::Schedule"

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> SchedulerSchedule:
        p = cloudformation_json["Properties"]
        schedule = scheduler_backend(region_name).create_schedule(
            description=p.get("Description"),
            end_date=p.get("EndDate"),
            flexible_time_window=p.get("FlexibleTimeWindow") or {"Mode": "OFF"},
            group_name=p.get("GroupName"),
            kms_key_arn=p.get("KmsKeyArn"),
            name=p.get("Name") or resource_name[:64],
            schedule_expression=p["ScheduleExpression"],
            schedule_expression_timezone=p.get("ScheduleExpressionTimezone"),
            start_date=p.get("StartDate"),
            state=p.get("State"),
            target=p["Target"],
            action_after_completion=p.get("ActionAfterCompletion"),
        )
        return cls(schedule, region_name)

    def get_cfn_attribute(self, attribute_name: str) -> Any:
        if attribute_name == "Arn":
            return self.schedule.arn
        raise CustomResourceFailed(f"Schedule has no attribute {attribute_name}")

    def delete(self, account_id: str, region: str) -> None:
        scheduler_backend(region).delete_schedule(self.schedule.group_name, self.schedule.name)


class SchedulerScheduleGroup(Model):
    def __init__(self, group: Any) -> None:
        self.group = group
        self.physical_id = group.name

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::Scheduler::ScheduleGroup"

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> SchedulerScheduleGroup:
        p = cloudformation_json["Properties"]
        group = scheduler_backend(region_name).create_schedule_group(
            p.get("Name") or resource_name[:64], p.get("Tags", [])
        )
        return cls(group)

    def get_cfn_attribute(self, attribute_name: str) -> Any:
        if attribute_name == "Arn":
            return self.group.arn
        raise CustomResourceFailed(f"ScheduleGroup has no attribute {attribute_name}")

    def delete(self, account_id: str, region: str) -> None:
        scheduler_backend(region).delete_schedule_group(self.group.name)


class LambdaVersion(Model):
    """moto's model has no physical id, so `!Ref Fn.Version` resolved to a Python object."""

    def __init__(self, version: Any) -> None:
        self.version = version
        self.physical_id = version.function_arn  # the qualified ARN, as Ref returns on AWS

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::Lambda::Version"

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> LambdaVersion:
        p = cloudformation_json["Properties"]
        return cls(lambda_backend(region_name).publish_version(p["FunctionName"], p.get("Description", "")))

    def get_cfn_attribute(self, attribute_name: str) -> Any:
        if attribute_name == "Version":
            return str(self.version.version)
        if attribute_name == "FunctionArn":
            return self.version.function_arn
        raise CustomResourceFailed(f"Lambda::Version has no attribute {attribute_name}")


class LambdaAlias(Model):
    def __init__(self, alias: Any) -> None:
        self.alias = alias
        self.physical_id = alias.arn

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::Lambda::Alias"

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> LambdaAlias:
        p = cloudformation_json["Properties"]
        version = str(p["FunctionVersion"]).rsplit(":", 1)[-1]  # a version number or a version ARN
        alias = lambda_backend(region_name).create_alias(
            p["Name"], p["FunctionName"], version, p.get("Description", ""), p.get("RoutingConfig")
        )
        return cls(alias)

    def get_cfn_attribute(self, attribute_name: str) -> Any:
        if attribute_name == "AliasArn":
            return self.alias.arn
        raise CustomResourceFailed(f"Lambda::Alias has no attribute {attribute_name}")


@functools.cache  # one class, however often moto asks
def ssm_document_class() -> type[CloudFormationModel]:
    from moto.ssm.models import Document

    class SsmDocument(Document):
        """moto's model, with CloudFormation's defaults: JSON format and a generated name."""

        @classmethod
        def create_from_cloudformation_json(
            cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
        ) -> Any:
            props = cloudformation_json["Properties"]
            props.setdefault("DocumentFormat", "JSON")  # moto rejects a missing format
            props.setdefault("Name", resource_name)  # moto would use a bare UUID
            return super().create_from_cloudformation_json(resource_name, cloudformation_json, account_id, region_name)

    return SsmDocument
