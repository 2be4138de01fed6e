"""CloudFormation resource types that this package creates itself, inside moto's stack creation.

moto's ResourceMap resolves intrinsics (Ref, Fn::GetAtt, Fn::Sub, Fn::Join, Fn::If, Fn::Select, ...)
lazily and in dependency order, then asks `resource_class_from_type(type)` for a model class. By
answering that question for the types below, our models receive fully resolved properties, and their
attributes (a custom resource's `Data`) are what later `Fn::GetAtt`s resolve to -- no second pass.

- AWS::StepFunctions::StateMachine: moto's own model writes to the backend that does *not* execute
  (invisible when `execute_state_machine` is on), ignores DefinitionSubstitutions and lacks GetAtt Arn.
- Custom::* / AWS::CloudFormation::CustomResource: moto would invoke the function in Docker and wait
  for a callback from host.docker.internal; here the real handler runs in-process and answers either
  by PUT to ResponseURL (cfn-response style, served on 127.0.0.1) or by returning the response.
- Scheduler, Lambda Version/Alias and SSM Document models: cfn_services.py.
- CloudFront (the public channels' distribution, its function and origin access control) and the
  bucket policies the local edge serves by: cfn_edge.py.
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import yaml
from moto.core.common_models import CloudFormationModel

from . import cfn_edge
from ._moto import Patches, s3_backend, sfn_backend
from .cfn_services import (
    CustomResourceFailed,
    LambdaAlias,
    LambdaVersion,
    Model,
    SchedulerSchedule,
    SchedulerScheduleGroup,
    ssm_document_class,
)
from .lambdas import LambdaRuntime


class _Active:
    runtime: LambdaRuntime | None = None
    responses: _ResponseCatcher | None = None


class _ResponseCatcher:
    """Stands in for the pre-signed S3 URL that CloudFormation gives custom resources."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bodies: dict[str, dict[str, Any]] = {}
        catcher = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with catcher._lock:
                    catcher._bodies[self.path.strip("/")] = json.loads(body or b"{}")
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, key: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/{key}"

    def pop(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._bodies.pop(key, None)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _stringify(value: Any) -> Any:
    """CloudFormation hands custom resources every scalar property as a string."""
    if isinstance(value, dict):
        return {k: _stringify(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_stringify(v) for v in value]
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def _moto_compatible(definition: str) -> str:
    """Rewrite what AWS accepts but moto's ASL grammar rejects (same meaning on AWS)."""
    try:
        tree = json.loads(definition)
    except ValueError:
        try:
            tree = yaml.safe_load(definition)
        except yaml.YAMLError:
            return definition  # let moto report the syntax error
        if not isinstance(tree, dict):
            return definition

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            # moto's grammar wants a decimal token here: `100` fails to parse, `100.0` works.
            return {
                k: float(v) if k == "ToleratedFailurePercentage" and isinstance(v, int) else walk(v)
                for k, v in node.items()
            }
        return [walk(v) for v in node] if isinstance(node, list) else node

    return json.dumps(walk(tree))


class EmulatedStateMachine(Model):
    def __init__(self, machine: Any) -> None:
        self.machine = machine
        self.physical_id = machine.arn

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::StepFunctions::StateMachine"

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> EmulatedStateMachine:
        props = cloudformation_json["Properties"]
        definition = props.get("DefinitionString")
        if definition is None and "Definition" in props:
            definition = json.dumps(props["Definition"])
        if definition is None and "DefinitionS3Location" in props:
            location = props["DefinitionS3Location"]
            definition = s3_backend().get_object(location["Bucket"], location["Key"]).value.decode()
        if definition is None:
            raise CustomResourceFailed(
                f"{kwargs.get('LogicalId')}: no DefinitionString/Definition/DefinitionS3Location"
            )
        for key, value in (props.get("DefinitionSubstitutions") or {}).items():
            text = json.dumps(value) if isinstance(value, bool) else str(value)
            definition = definition.replace("${" + key + "}", text)
        definition = _moto_compatible(definition)  # also YAML -> JSON (a YAML DefinitionUri)
        name = props.get("StateMachineName") or resource_name[:80]
        tags = [{"key": t["Key"], "value": t["Value"]} for t in props.get("Tags", [])]
        machine = sfn_backend(region_name).create_state_machine(name, definition, props.get("RoleArn", ""), tags=tags)
        return cls(machine)

    def get_cfn_attribute(self, attribute_name: str) -> Any:
        if attribute_name == "Arn":
            return self.machine.arn
        if attribute_name == "Name":
            return self.machine.name
        if attribute_name == "StateMachineRevisionId":
            return self.machine.arn
        raise CustomResourceFailed(f"StateMachine has no attribute {attribute_name}")

    @classmethod
    def delete_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str
    ) -> None:
        sfn_backend(region_name).delete_state_machine(resource_name)


class CustomResource(Model):
    def __init__(self, region: str, props: dict[str, Any], event: dict[str, Any], response: dict[str, Any]) -> None:
        self.region = region
        self.properties = props
        self.event = event
        self.physical_id = str(
            response.get("PhysicalResourceId") or f"{event['LogicalResourceId']}-{uuid.uuid4().hex[:12]}"
        )
        self.data: dict[str, Any] = dict(response.get("Data") or {})

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::CloudFormation::CustomResource"

    @staticmethod
    def call(region: str, event: dict[str, Any]) -> dict[str, Any]:
        """Invoke the ServiceToken's handler; return its response (raise CustomResourceFailed)."""
        runtime, catcher = _Active.runtime, _Active.responses
        assert runtime is not None and catcher is not None, "cfn_models not installed"
        key = event["RequestId"]
        event["ResponseURL"] = catcher.url(key)
        payload, errored = runtime.invoke_by_name(region, event["ServiceToken"], event)
        response = catcher.pop(key)
        where = f"{event['LogicalResourceId']} ({event['RequestType']})"
        if errored:
            raise CustomResourceFailed(f"{where}: {payload.get('errorType')}: {payload.get('errorMessage')}")
        if response is None and isinstance(payload, dict) and {"Data", "PhysicalResourceId", "Status"} & set(payload):
            response = payload  # provider-framework style: the handler returns the response
        if response is None:
            raise CustomResourceFailed(f"{where}: no response (neither a PUT to ResponseURL nor a returned response)")
        if response.get("Status", "SUCCESS") != "SUCCESS":
            raise CustomResourceFailed(f"{where}: {response.get('Reason') or 'FAILED without a reason'}")
        return response

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> CustomResource:
        props = cloudformation_json["Properties"]
        if "ServiceToken" not in props:
            raise CustomResourceFailed(f"{kwargs['LogicalId']}: ServiceToken is required")
        event = {
            "RequestType": "Create",
            "ServiceToken": props["ServiceToken"],
            "StackId": kwargs["StackId"],
            "RequestId": str(uuid.uuid4()),
            "LogicalResourceId": kwargs["LogicalId"],
            "ResourceType": kwargs["ResourceType"],
            "ResourceProperties": _stringify(props),
        }
        return cls(region_name, props, event, cls.call(region_name, event))

    def get_cfn_attribute(self, attribute_name: str) -> Any:
        if attribute_name not in self.data:
            raise CustomResourceFailed(
                f"CustomResource attribute error: Vendor response doesn't contain {attribute_name} attribute"
            )
        return self.data[attribute_name]

    def delete(self, account_id: str, region: str) -> None:
        event = {
            **self.event,
            "RequestType": "Delete",
            "RequestId": str(uuid.uuid4()),
            "PhysicalResourceId": self.physical_id,
        }
        with contextlib.suppress(CustomResourceFailed):  # CloudFormation would say DELETE_FAILED; no matter here
            self.call(region, event)


EMULATED: dict[str, type[Model]] = {
    m.cloudformation_type(): m
    for m in (
        EmulatedStateMachine,
        CustomResource,
        SchedulerSchedule,
        SchedulerScheduleGroup,
        LambdaVersion,
        LambdaAlias,
    )
} | {m.cloudformation_type(): m for m in cfn_edge.MODELS}


_LOWER_CASE_NAMES = {"AWS::ECR::Repository"}


def emulated_class(resource_type: str) -> type[CloudFormationModel] | None:
    if resource_type.startswith("Custom::"):
        return CustomResource
    if resource_type == "AWS::SSM::Document":
        return ssm_document_class()
    return EMULATED.get(resource_type)


def install(patches: Patches, runtime: LambdaRuntime) -> None:
    import moto.cloudformation.parsing as parsing

    original = vars(parsing)["resource_class_from_type"]

    def resource_class_from_type(resource_type: str) -> Any:
        return emulated_class(resource_type) or original(resource_type)

    patches.set(parsing, "resource_class_from_type", resource_class_from_type)

    generate = vars(parsing)["generate_resource_name"]

    def generate_resource_name(resource_type: str, stack_name: str, logical_id: str) -> str:
        # CloudFormation generates lower-case names where the service demands them; moto only
        # does so for S3 buckets, so a stack with an unnamed ECR repository would fail to create.
        name: str = generate(resource_type, stack_name, logical_id)
        return name.lower() if resource_type in _LOWER_CASE_NAMES else name

    patches.set(parsing, "generate_resource_name", generate_resource_name)

    clean = vars(parsing)["clean_json"]

    def clean_json(resource_json: Any, resources_map: Any) -> Any:
        # CloudFormation leaves an AWS::NoValue list element out (`!If [Cond, item, !Ref AWS::NoValue]`
        # in a policy's Statement list); moto drops such dict values but keeps a None in lists, which
        # would reach IAM as a null statement. moto's recursion calls this name, so nesting is covered.
        if isinstance(resource_json, list):
            return [v for v in (clean_json(item, resources_map) for item in resource_json) if v is not None]
        return clean(resource_json, resources_map)

    patches.set(parsing, "clean_json", clean_json)

    from moto.awslambda.models import LambdaFunction

    create_function = vars(LambdaFunction)["create_from_cloudformation_json"].__func__

    def create_with_string_environment(cls: Any, name: str, cfn: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        # Lambda keeps environment variables as strings (a Number parameter's Ref arrives as "24");
        # moto kept the int, which GetFunctionConfiguration returned and UpdateFunctionConfiguration refused.
        environment = cfn.get("Properties", {}).get("Environment")
        if isinstance(environment, dict) and isinstance(environment.get("Variables"), dict):
            environment["Variables"] = _stringify(environment["Variables"])
        return create_function(cls, name, cfn, *args, **kwargs)

    patches.set(LambdaFunction, "create_from_cloudformation_json", classmethod(create_with_string_environment))
    _Active.runtime = runtime
    _Active.responses = _ResponseCatcher()


def uninstall() -> None:
    cfn_edge.DEPLOYED.clear()
    if _Active.responses is not None:
        _Active.responses.close()
    _Active.runtime = _Active.responses = None
