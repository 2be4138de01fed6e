"""CloudFormation models for the public channels' edge (template.yaml: EdgeDistribution and its parts).

moto has CloudFront's control plane (distributions, origin access controls, invalidations) but no
CloudFormation models for it and no CloudFront Functions; it also keeps bucket policies only to
enforce them without conditions (its TLS-only Deny would refuse every request). These models create
what moto has, and keep each resource's resolved properties, so the local edge (wheelfoundry_local.edge)
serves by the template's own distribution, function code and bucket policy statements.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from ._moto import ACCOUNT_ID, cloudfront_backend
from .cfn_services import CustomResourceFailed, Model


@dataclass(frozen=True)
class DeployedDistribution:
    id: str
    arn: str
    domain_name: str
    config: dict[str, Any]  # DistributionConfig as the template resolved it


class _Registry:
    """What the stacks of this process deployed: distributions, function code, bucket policies."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.distributions: dict[str, DeployedDistribution] = {}
        self.functions: dict[str, str] = {}  # FunctionARN -> code
        self.policies: dict[str, dict[str, Any]] = {}  # bucket name -> policy document

    def clear(self) -> None:
        with self.lock:
            self.distributions.clear()
            self.functions.clear()
            self.policies.clear()


DEPLOYED = _Registry()


def distributions() -> list[DeployedDistribution]:
    with DEPLOYED.lock:
        return list(DEPLOYED.distributions.values())


def function_code(arn: str) -> str:
    with DEPLOYED.lock:
        try:
            return DEPLOYED.functions[arn]
        except KeyError:
            raise KeyError(f"no CloudFront function {arn} was deployed") from None


def bucket_policy(bucket: str) -> dict[str, Any]:
    with DEPLOYED.lock:
        return DEPLOYED.policies.get(bucket) or {"Statement": []}


class OriginAccessControl(Model):
    def __init__(self, control: Any) -> None:
        self.control = control
        self.physical_id = control.id

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::CloudFront::OriginAccessControl"

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> OriginAccessControl:
        config = cloudformation_json["Properties"]["OriginAccessControlConfig"]
        return cls(cloudfront_backend().create_origin_access_control(config))

    def get_cfn_attribute(self, attribute_name: str) -> Any:
        if attribute_name == "Id":
            return self.control.id
        raise CustomResourceFailed(f"OriginAccessControl has no attribute {attribute_name}")


class Function(Model):
    def __init__(self, name: str, code: str) -> None:
        self.arn = f"arn:aws:cloudfront::{ACCOUNT_ID}:function/{name}"
        self.physical_id = self.arn
        with DEPLOYED.lock:
            DEPLOYED.functions[self.arn] = code

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::CloudFront::Function"

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> Function:
        props = cloudformation_json["Properties"]
        runtime = (props.get("FunctionConfig") or {}).get("Runtime")
        if runtime not in ("cloudfront-js-1.0", "cloudfront-js-2.0"):
            raise CustomResourceFailed(f"{kwargs.get('LogicalId')}: FunctionConfig.Runtime {runtime!r} is not one")
        return cls(props["Name"], props["FunctionCode"])

    def get_cfn_attribute(self, attribute_name: str) -> Any:
        if attribute_name in ("FunctionARN", "FunctionMetadata.FunctionARN"):
            return self.arn
        raise CustomResourceFailed(f"Function has no attribute {attribute_name}")


class Distribution(Model):
    def __init__(self, deployed: DeployedDistribution) -> None:
        self.deployed = deployed
        self.physical_id = deployed.id

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::CloudFront::Distribution"

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> Distribution:
        config = cloudformation_json["Properties"]["DistributionConfig"]
        default = config["DefaultCacheBehavior"]
        # moto's model keeps a part of the configuration (and wants the API's shape): enough for ids,
        # the domain name and invalidations. The rest is served from the resolved properties kept here.
        minimal = {
            "CallerReference": str(uuid.uuid4()),
            "Comment": config.get("Comment", ""),
            "Enabled": config.get("Enabled", True),
            "Origins": {"Items": [{"Id": o["Id"], "DomainName": o["DomainName"]} for o in config["Origins"]]},
            "DefaultCacheBehavior": {
                "TargetOriginId": default["TargetOriginId"],
                "ViewerProtocolPolicy": default["ViewerProtocolPolicy"],
            },
        }
        dist, _, _ = cloudfront_backend().create_distribution(minimal, [])
        # CloudFront's ARNs have an empty region field; moto's drop it (arn:aws:cloudfront:<account>:...).
        arn = f"arn:aws:cloudfront::{ACCOUNT_ID}:distribution/{dist.distribution_id}"
        deployed = DeployedDistribution(dist.distribution_id, arn, dist.domain_name, config)
        with DEPLOYED.lock:
            DEPLOYED.distributions[deployed.id] = deployed
        return cls(deployed)

    def get_cfn_attribute(self, attribute_name: str) -> Any:
        if attribute_name == "DomainName":
            return self.deployed.domain_name
        if attribute_name == "Id":
            return self.deployed.id
        raise CustomResourceFailed(f"Distribution has no attribute {attribute_name}")

    def delete(self, account_id: str, region: str) -> None:
        with DEPLOYED.lock:
            DEPLOYED.distributions.pop(self.deployed.id, None)


class BucketPolicy(Model):
    """Kept for the local edge, not given to moto (see the module's docstring)."""

    def __init__(self, bucket: str, document: dict[str, Any]) -> None:
        self.physical_id = bucket
        with DEPLOYED.lock:
            DEPLOYED.policies[bucket] = document

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::S3::BucketPolicy"

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> BucketPolicy:
        props = cloudformation_json["Properties"]
        document = props["PolicyDocument"]
        return cls(props["Bucket"], json.loads(document) if isinstance(document, str) else document)

    def get_cfn_attribute(self, attribute_name: str) -> Any:
        raise CustomResourceFailed(f"BucketPolicy has no attribute {attribute_name}")


MODELS: tuple[type[Model], ...] = (OriginAccessControl, Function, Distribution, BucketPolicy)
