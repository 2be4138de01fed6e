"""The project's own template.yaml deploys: every resource is created or reported with a reason."""

from __future__ import annotations

import json
from pathlib import Path

from wheelfoundry_local import EmbeddedAws
from wheelfoundry_local.cfn_models import emulated_class

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"


def test_real_template_deploys(aws: EmbeddedAws) -> None:
    from moto.cloudformation.parsing import get_model_map

    stack = aws.deploy(TEMPLATE)
    skipped = {s.logical_id: s for s in stack.skipped}
    assert set(stack.types) == set(stack.resources) | set(skipped)
    for item in stack.skipped:
        assert item.reason, item
        # Only types that neither moto nor this package creates may be skipped (or false conditions).
        assert item.reason.startswith("Condition ") or (
            emulated_class(item.type) is None and item.type not in get_model_map()
        ), item
    assert stack.outputs["StateMachineArn"] == stack.state_machine_arn
    sfn = aws.client("stepfunctions")
    definition = sfn.describe_state_machine(stateMachineArn=stack.state_machine_arn)["definition"]
    assert "${" not in definition  # every DefinitionSubstitution applied
    json.loads(definition)


def test_real_template_custom_resources_and_schedules_ran(aws: EmbeddedAws) -> None:
    stack = aws.deploy(TEMPLATE)
    custom = {
        lid for lid, t in stack.types.items() if t.startswith("Custom::") or t == "AWS::CloudFormation::CustomResource"
    }
    for logical_id in custom:
        assert logical_id in stack.resources  # created: its handler answered SUCCESS
    calls = [c for c in aws.invocations.all() if isinstance(c.event, dict) and c.event.get("RequestType") == "Create"]
    assert {c.event["LogicalResourceId"] for c in calls} == custom
    assert all(c.ok for c in calls)
    scheduler = aws.client("scheduler")
    for logical_id in stack.of_type("AWS::Scheduler::Schedule"):
        schedule = scheduler.get_schedule(Name=stack.schedule_name(logical_id))
        assert schedule["Target"]["Arn"] and schedule["ScheduleExpression"]
