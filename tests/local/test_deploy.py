"""Deploying SAM templates: packaging, translation, moto + emulated resource types, reporting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wheelfoundry_local import DeployedStack, DeployError, EmbeddedAws
from wheelfoundry_local.cfn_yaml import load_template

from .conftest import FIXTURES, TEMPLATE


def test_outputs_resolve_intrinsics_across_emulated_resources(stack: DeployedStack) -> None:
    assert stack.outputs["Message"] == "hello x3"  # GetAtt of a custom resource's Data
    assert stack.outputs["ConfigId"] == "config-hello"  # Ref = the PhysicalResourceId it returned
    assert stack.outputs["NightlyArn"].endswith(f":schedule/default/{stack.schedule_name('Nightly')}")
    assert stack.outputs["Second"] == "b"
    assert stack.outputs["Joined"] == "hello-us-east-1"
    assert stack.outputs["ColorsArn"] == stack.state_machine("ColorsMachine")


def test_nothing_is_dropped_silently(stack: DeployedStack) -> None:
    skipped = {s.logical_id: s for s in stack.skipped}
    assert set(skipped) == {"ExtraQueuePolicy", "ExtraQueue"}
    assert "moto enforces no resource policies" in skipped["ExtraQueuePolicy"].reason
    assert "BucketPolicy" in stack.resources  # kept for the local edge (cfn_edge)
    assert skipped["ExtraQueue"].reason == "Condition Extras is false"
    # Every resource of the translated template is either created or reported.
    assert set(stack.types) == set(stack.resources) | set(skipped)


def test_parameters_and_conditions(aws: EmbeddedAws) -> None:
    stack = aws.deploy(TEMPLATE, {"Greeting": "hi", "WithExtras": True})
    assert stack.outputs["Message"] == "hi x3"
    assert "ExtraQueue" in stack.resources
    schedule = aws.client("scheduler").get_schedule(Name=stack.schedule_name("Nightly"))
    assert schedule["State"] == "ENABLED"  # Fn::If on the condition


def test_unknown_parameter_is_an_error(aws: EmbeddedAws) -> None:
    with pytest.raises(DeployError, match="Nope"):
        aws.deploy(TEMPLATE, {"Nope": "1"})


def test_definition_uri_is_packaged_with_substitutions(aws: EmbeddedAws, stack: DeployedStack) -> None:
    sfn = aws.client("stepfunctions")
    definition = json.loads(
        sfn.describe_state_machine(stateMachineArn=stack.state_machine("ColorsMachine"))["definition"]
    )
    greet = definition["States"]["Greet"]
    assert greet["Resource"].endswith(":function:" + stack.function_name("EchoFunction"))
    assert greet["Parameters"] == {"message": "hello x3", "limit": 5}  # an unquoted ${Limit} became a number
    both = definition["States"]["Fan"]["ItemProcessor"]["States"]["Both"]["Branches"]
    assert both[0]["States"]["Red"]["Parameters"]["FunctionName"].endswith(stack.function_name("RedFunction"))
    agent = json.loads(sfn.describe_state_machine(stateMachineArn=stack.state_machine("AgentMachine"))["definition"])
    assert agent["States"]["Run"]["Parameters"]["DocumentName"] == stack.document_name()


def test_code_is_zipped_to_the_artifacts_bucket(aws: EmbeddedAws, stack: DeployedStack) -> None:
    function = aws.client("lambda").get_function(FunctionName=stack.function_name("RedFunction"))
    assert function["Configuration"]["Handler"] == "wflt_handlers.color"
    assert function["Configuration"]["Environment"]["Variables"] == {"SHARED": "everyone", "COLOR": "red"}
    keys = [o["Key"] for o in aws.client("s3").list_objects_v2(Bucket="wheelfoundry-local-artifacts")["Contents"]]
    assert any(k.endswith(".zip") for k in keys)


def test_custom_resource_gets_a_create_event_with_string_properties(aws: EmbeddedAws, stack: DeployedStack) -> None:
    (call,) = aws.invocations.of("ConfigProviderFunction")
    assert call.event["RequestType"] == "Create"
    assert call.event["LogicalResourceId"] == "Config"
    assert call.event["ResourceType"] == "Custom::Config"
    assert call.event["ResourceProperties"]["Count"] == "3"  # CloudFormation stringifies scalars
    assert call.event["ResourceProperties"]["ServiceToken"].endswith(stack.function_name("ConfigProviderFunction"))
    echo = aws.client("lambda").get_function(FunctionName=stack.function_name("EchoFunction"))
    assert echo["Configuration"]["Environment"]["Variables"]["MESSAGE"] == "hello x3"


def test_failing_custom_resource_fails_and_rolls_back(aws: EmbeddedAws, tmp_path: Path) -> None:
    template = load_template(TEMPLATE)
    template["Resources"]["Config"]["Properties"]["Fail"] = True
    broken = FIXTURES / "sam" / "broken.generated.json"  # beside the original: CodeUri paths are relative
    broken.write_text(json.dumps(template))
    try:
        with pytest.raises(DeployError, match="Config \\(Create\\): asked to fail"):
            aws.deploy(broken)
    finally:
        broken.unlink()
    stacks = aws.client("cloudformation").list_stacks()["StackSummaries"]
    assert [s["StackStatus"] for s in stacks] == ["DELETE_COMPLETE"]


def test_a_second_stack_of_a_live_stacks_name_fails_and_leaves_the_live_one(
    aws: EmbeddedAws, stack: DeployedStack
) -> None:
    with pytest.raises(DeployError, match=f"Stack {stack.name} failed to create"):
        aws.deploy(TEMPLATE)  # the same name: CloudFormation refuses it, and the rollback is only its own
    (live,) = aws.client("cloudformation").describe_stacks(StackName=stack.name)["Stacks"]
    assert (live["StackId"], live["StackStatus"]) == (stack.stack_id, "CREATE_COMPLETE")


def test_scheduler_schedule_from_the_template(aws: EmbeddedAws, stack: DeployedStack) -> None:
    scheduler = aws.client("scheduler")
    nightly = scheduler.get_schedule(Name=stack.schedule_name("Nightly"))
    assert nightly["ScheduleExpression"] == "cron(0 4 * * ? *)"
    assert nightly["State"] == "DISABLED"
    assert nightly["Target"]["Arn"] == stack.state_machine("ColorsMachine")
    assert json.loads(nightly["Target"]["Input"]) == {"items": [1, 2], "from": stack.name}
    hourly = scheduler.get_schedule(Name=stack.schedule_name("ColorsMachineHourly"))  # SAM's ScheduleV2 event
    assert hourly["Target"]["Arn"] == stack.state_machine("ColorsMachine")


def test_lookups_name_what_is_ambiguous(stack: DeployedStack) -> None:
    with pytest.raises(LookupError, match="2 resources"):
        _ = stack.state_machine_arn
    with pytest.raises(KeyError):
        stack.function_name("Bucket")
    assert stack.bucket() == stack.physical_id("Bucket")


def test_yaml_short_forms() -> None:
    template = load_template(TEMPLATE)
    assert template["AWSTemplateFormatVersion"] == "2010-09-09"  # not a date
    props = template["Resources"]["ColorsMachine"]["Properties"]
    assert props["DefinitionSubstitutions"]["RedFunctionArn"] == {"Fn::GetAtt": ["RedFunction", "Arn"]}
    assert props["DefinitionSubstitutions"]["Limit"] == {"Ref": "Limit"}
    assert template["Outputs"]["Second"]["Value"] == {"Fn::Select": [1, ["a", "b", "c"]]}
    assert template["Conditions"]["Extras"] == {"Fn::Equals": [{"Ref": "WithExtras"}, "true"]}
