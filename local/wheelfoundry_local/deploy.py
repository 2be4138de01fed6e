"""Deploy a SAM/CloudFormation template into moto: package, translate, create, report.

1. Package like `sam package`: each local CodeUri/Code/ContentUri directory is zipped and uploaded to
   an artifacts bucket in moto (moto's Lambda needs the zip to exist); a local DefinitionUri is
   inlined as `Definition` (DefinitionSubstitutions are kept and applied at creation).
   A definition that is not JSON until substituted is uploaded instead, as sam package does.
2. Translate SAM to CloudFormation with samtranslator, offline (bundled managed-policy map).
3. Create the stack with moto's CloudFormation, in-process. Types moto lacks or gets wrong are
   created by cfn_models.py from within the same pass, so intrinsics between them resolve normally.
   Types nobody emulates are reported in DeployedStack.skipped; nothing is dropped silently.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import logging
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from . import cfn_models
from ._moto import ACCOUNT_ID, cfn_backend
from .cfn_yaml import load_template
from .lambdas import LambdaRuntime

SAM_TRANSFORM = "AWS::Serverless-2016-10-31"
# Why a type is not emulated, where there is more to say than "moto has no model for it".
NOT_EMULATED = {
    "AWS::SQS::QueuePolicy": "access policy; moto enforces no resource policies",
    "AWS::SNS::TopicPolicy": "access policy; moto enforces no resource policies",
    "AWS::Lambda::EventInvokeConfig": "async retry settings; deliveries here are synchronous",
}
_NO_ZIP = ("__pycache__", ".pyc", ".pytest_cache", ".mypy_cache")


class DeployError(Exception):
    """The stack could not be created; the partial stack was deleted (CloudFormation's rollback)."""


@dataclass(frozen=True)
class SkippedResource:
    logical_id: str
    type: str
    reason: str


@dataclass
class DeployedStack:
    name: str
    stack_id: str
    region: str
    outputs: dict[str, Any]
    resources: dict[str, str]  # logical id -> physical id
    types: dict[str, str]  # logical id -> resource type (of the translated template)
    skipped: list[SkippedResource] = field(default_factory=list)
    template: dict[str, Any] = field(default_factory=dict, repr=False)  # as given to moto

    def physical_id(self, logical_id: str) -> str:
        try:
            return self.resources[logical_id]
        except KeyError:
            raise KeyError(f"{logical_id} not created; created: {sorted(self.resources)}") from None

    def of_type(self, resource_type: str) -> dict[str, str]:
        return {
            lid: self.resources[lid] for lid, t in self.types.items() if t == resource_type and lid in self.resources
        }

    def _one(self, resource_type: str, logical_id: str | None) -> str:
        if logical_id is not None:
            if self.types.get(logical_id) != resource_type:
                raise KeyError(f"{logical_id} is not a {resource_type}")
            return self.physical_id(logical_id)
        found = self.of_type(resource_type)
        if len(found) != 1:
            raise LookupError(f"{len(found)} resources of type {resource_type} ({sorted(found)}): name one")
        return next(iter(found.values()))

    @property
    def state_machine_arn(self) -> str:
        return self._one("AWS::StepFunctions::StateMachine", None)

    def state_machine(self, logical_id: str | None = None) -> str:
        return self._one("AWS::StepFunctions::StateMachine", logical_id)

    def function_name(self, logical_id: str) -> str:
        return self._one("AWS::Lambda::Function", logical_id)

    def bucket(self, logical_id: str | None = None) -> str:
        return self._one("AWS::S3::Bucket", logical_id)

    def document_name(self, logical_id: str | None = None) -> str:
        return self._one("AWS::SSM::Document", logical_id)

    def rule_name(self, logical_id: str) -> str:
        return self._one("AWS::Events::Rule", logical_id)

    def schedule_name(self, logical_id: str) -> str:
        return self._one("AWS::Scheduler::Schedule", logical_id)


def _zip_dir(path: Path) -> bytes:
    """A reproducible zip (sorted entries, fixed timestamps), so its hash names its content."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for item in sorted(path.rglob("*")):
            rel = item.relative_to(path).as_posix()
            if item.is_dir() or any(part in rel for part in _NO_ZIP):
                continue
            info = zipfile.ZipInfo(rel, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (item.stat().st_mode & 0o777) << 16
            archive.writestr(info, item.read_bytes(), zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


class _Packager:
    def __init__(self, base: Path, bucket: str, runtime: LambdaRuntime) -> None:
        self.runtime = runtime
        self.base = base
        self.bucket = bucket
        self.s3 = boto3.client("s3")
        self.s3.create_bucket(Bucket=bucket)

    @staticmethod
    def is_local(uri: Any) -> bool:
        return isinstance(uri, str) and not uri.startswith("s3://")

    def upload(self, uri: str) -> tuple[str, str, Path]:
        path = (self.base / uri).resolve()
        if not path.is_dir():
            raise DeployError(f"{uri}: not a directory under {self.base}")
        body = _zip_dir(path)
        key = f"{hashlib.sha256(body).hexdigest()}.zip"
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=body)
        self.runtime.add_code(self.bucket, key, path)
        return self.bucket, key, path

    def s3_uri(self, uri: str) -> tuple[str, Path]:
        bucket, key, path = self.upload(uri)
        return f"s3://{bucket}/{key}", path

    def state_machine(self, props: dict[str, Any]) -> None:
        """Inline a local DefinitionUri as `Definition`. A file that is JSON only after substitution
        (`"Limit": ${Limit}`) is uploaded instead and referenced as {Bucket, Key}, as `sam package`
        does for every definition; DefinitionSubstitutions then apply to its text at creation."""
        path = self.base / props.pop("DefinitionUri")
        text = path.read_text(encoding="utf-8")
        try:
            props["Definition"] = json.loads(text) if path.suffix == ".json" else None
        except ValueError:
            props["Definition"] = None
        if props["Definition"] is None:
            del props["Definition"]
            key = f"{hashlib.sha256(text.encode()).hexdigest()}{path.suffix}"
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=text.encode())
            props["DefinitionUri"] = {"Bucket": self.bucket, "Key": key}

    def package(self, template: dict[str, Any]) -> None:
        global_fn = (template.get("Globals") or {}).get("Function") or {}
        if self.is_local(global_fn.get("CodeUri")):
            global_fn["CodeUri"], _ = self.s3_uri(global_fn["CodeUri"])
        for resource in (template.get("Resources") or {}).values():
            kind, props = resource.get("Type"), resource.get("Properties") or {}
            if kind == "AWS::Serverless::Function":
                if self.is_local(props.get("CodeUri")):
                    props["CodeUri"], _ = self.s3_uri(props["CodeUri"])
            elif kind == "AWS::Lambda::Function" and self.is_local(props.get("Code")):
                bucket, key, _ = self.upload(props["Code"])
                props["Code"] = {"S3Bucket": bucket, "S3Key": key}
            elif kind == "AWS::Serverless::LayerVersion" and self.is_local(props.get("ContentUri")):
                props["ContentUri"], _ = self.s3_uri(props["ContentUri"])
            elif kind == "AWS::Serverless::StateMachine" and self.is_local(props.get("DefinitionUri")):
                self.state_machine(props)


class _BundledPolicies:
    """samtranslator's managed-policy loader, answered from its bundled map (no IAM call)."""

    def load(self) -> dict[str, str]:
        from samtranslator.internal.managed_policies import get_bundled_managed_policy_map

        return get_bundled_managed_policy_map("aws") or {}


def _is_sam(template: dict[str, Any]) -> bool:
    transform = template.get("Transform")
    return SAM_TRANSFORM in (transform if isinstance(transform, list) else [transform])


def translate(template: dict[str, Any], parameters: dict[str, str], region: str) -> dict[str, Any]:
    if not _is_sam(template):
        return template
    from samtranslator.translator.arn_generator import ArnGenerator
    from samtranslator.translator.transform import transform

    values = {"AWS::Region": region, "AWS::Partition": "aws", "AWS::AccountId": ACCOUNT_ID, **parameters}
    saved, ArnGenerator.BOTO_SESSION_REGION_NAME = ArnGenerator.BOTO_SESSION_REGION_NAME, region
    try:
        return transform(template, values, _BundledPolicies())  # type: ignore[no-any-return]
    finally:
        ArnGenerator.BOTO_SESSION_REGION_NAME = saved


def classify(template: dict[str, Any]) -> list[SkippedResource]:
    """Resources that nobody creates, with why."""
    from moto.cloudformation.parsing import NULL_MODELS, get_model_map

    moto_types = set(get_model_map())
    skipped = []
    for logical_id, resource in template.get("Resources", {}).items():
        kind = resource.get("Type", "")
        if cfn_models.emulated_class(kind) is not None or kind in moto_types:
            continue
        reason = "moto treats it as a no-op" if kind in NULL_MODELS else "no moto CloudFormation model"
        if kind in NOT_EMULATED:
            reason += f" ({NOT_EMULATED[kind]})"
        skipped.append(SkippedResource(logical_id, kind, reason))
    return skipped


def deploy(
    runtime: LambdaRuntime,
    template_path: str | Path,
    *,
    region: str,
    parameters: dict[str, Any] | None = None,
    stack_name: str = "wheelfoundry",
    artifacts_bucket: str = "wheelfoundry-local-artifacts",
) -> DeployedStack:
    path = Path(template_path).resolve()
    params = {
        k: v if isinstance(v, str) else json.dumps(v) if isinstance(v, bool) else str(v)
        for k, v in (parameters or {}).items()
    }
    source = load_template(path)
    packager = _Packager(path.parent, artifacts_bucket, runtime)
    packager.package(source)
    cfn = translate(copy.deepcopy(source), params, region)
    declared = set(cfn.get("Parameters") or {})
    unknown = sorted(set(params) - declared)
    if unknown:
        raise DeployError(f"Unknown parameters {unknown}; the template declares {sorted(declared)}")
    skipped = classify(cfn)

    backend = cfn_backend(region)
    moto_log = logging.getLogger("moto")
    level = moto_log.level
    before = set(backend.stacks)  # stack ids: a failed create rolls back its own stack, not a live namesake
    try:
        # moto warns about each unsupported type; `skipped` reports them, once, with the reason.
        moto_log.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            stack = backend.create_stack(name=stack_name, template=json.dumps(cfn), parameters=params)
    except Exception as exc:
        for stack_id, existing in list(backend.stacks.items()):
            if existing.name == stack_name and stack_id not in before:
                try:
                    backend.delete_stack(stack_id)
                except Exception as cleanup:  # rollback is best effort, like CloudFormation's
                    exc.add_note(f"rollback failed: {cleanup!r}")
        raise DeployError(f"Stack {stack_name} failed to create: {exc}") from exc
    finally:
        moto_log.setLevel(level)

    parsed = stack.resource_map._parsed_resources  # moto private: created models by logical id
    resources: dict[str, str] = {}
    types: dict[str, str] = {}
    skipped_ids = {s.logical_id for s in skipped}
    for logical_id, resource in cfn.get("Resources", {}).items():
        types[logical_id] = resource.get("Type", "")
        model = parsed.get(logical_id)
        if model is not None and hasattr(model, "physical_resource_id"):
            resources[logical_id] = str(model.physical_resource_id)
        elif model is not None:  # created, but moto's model has no physical id (e.g. Lambda::Permission)
            resources[logical_id] = f"{stack_name}-{logical_id}"
        elif logical_id not in skipped_ids:
            condition = resource.get("Condition")
            reason = f"Condition {condition} is false" if condition else "moto created nothing"
            skipped.append(SkippedResource(logical_id, types[logical_id], reason))
    for logical_id, function in resources.items():
        if types[logical_id] == "AWS::Lambda::Function":
            runtime.faults.alias(logical_id, function)
    outputs = {o["OutputKey"]: o["OutputValue"] for o in (stack.outputs or [])}
    return DeployedStack(stack_name, stack.stack_id, region, outputs, resources, types, skipped, cfn)
