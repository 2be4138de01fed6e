"""The shipped template: least privilege, no inbound ports, IMDSv2, encrypted TLS-only bucket."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers import ROOT, TEMPLATE, build_script, resources, template
from wheelfoundry.request.presets import load_preset
from wheelfoundry.request.request import parse_request


def _tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def test_cfn_lint_reports_nothing() -> None:
    result = subprocess.run([_tool("cfn-lint"), str(TEMPLATE)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_bucket_blocks_public_access_requires_tls_and_encrypts() -> None:
    bucket = resources()["WheelBucket"]["Properties"]
    assert all(bucket["PublicAccessBlockConfiguration"].values())
    assert bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}
    policy = resources()["WheelBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert any(s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in policy)


def test_instances_have_no_inbound_port_imdsv2_and_terminate_on_shutdown() -> None:
    group = resources()["BuildSecurityGroup"]["Properties"]
    assert "SecurityGroupIngress" not in group
    assert not resources("AWS::EC2::SecurityGroupIngress")
    for name in ("LaunchTemplateX86", "LaunchTemplateArm64"):
        data = resources()[name]["Properties"]["LaunchTemplateData"]
        assert data["MetadataOptions"]["HttpTokens"] == "required"
        # 1: the build containers (bridged, a hop further) never reach IMDS (docs/security.md section 2).
        assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
        assert data["InstanceInitiatedShutdownBehavior"] == "terminate"
        ebs = data["BlockDeviceMappings"][0]["Ebs"]
        assert ebs["Encrypted"] is True and ebs["VolumeType"] == "gp3"
        assert "KeyName" not in data  # no SSH


def _branches(statement: dict[str, Any]) -> list[dict[str, Any]]:
    """A statement, or both sides of a conditional one (`!If [Cond, {...}, !Ref AWS::NoValue]`)."""
    if "Fn::If" not in statement:
        return [statement]
    return [s for s in statement["Fn::If"][1:] if isinstance(s, dict) and "Ref" not in s]


def _statements(policies: list[Any]) -> list[dict[str, Any]]:
    return [
        b for p in policies if isinstance(p, dict) and "Statement" in p for s in p["Statement"] for b in _branches(s)
    ]


def test_s3_access_is_scoped_to_the_stacks_bucket() -> None:
    functions = resources("AWS::Serverless::Function")
    role = resources()["BuildInstanceRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    statements = role + [s for f in functions.values() for s in _statements(f["Properties"].get("Policies", []))]
    for statement in statements:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if any(a.startswith("s3:") for a in actions):
            text = json.dumps(statement["Resource"])
            assert "WheelBucket" in text and '"*"' not in text, statement


def test_terminate_and_run_are_limited_to_this_stacks_tags() -> None:
    functions = resources("AWS::Serverless::Function")
    for name in ("TerminateFunction", "ReaperFunction"):
        (terminate,) = [
            s
            for s in _statements(functions[name]["Properties"]["Policies"])
            if "ec2:TerminateInstances" in json.dumps(s["Action"])
        ]
        assert "aws:ResourceTag/wheelfoundry:stack" in json.dumps(terminate["Condition"])
    launch = _statements(functions["LaunchFunction"]["Properties"]["Policies"])
    tagged = next(s for s in launch if s.get("Sid") == "LaunchTaggedOnly")
    assert "aws:RequestTag/wheelfoundry:stack" in json.dumps(tagged["Condition"])


def test_document_parameters_are_patterned_and_passed_as_environment() -> None:
    content = resources()["BuildDocument"]["Properties"]["Content"]
    for name, spec in content["parameters"].items():
        assert spec.get("allowedPattern", "").startswith("^") and spec["allowedPattern"].endswith("$"), name
        if name != "ExecutionTimeout":  # the agent substitutes that one into timeoutSeconds
            assert spec["interpolationType"] == "ENV_VAR", name
    assert "{{" not in build_script()  # nothing is pasted into the script


def test_build_script_is_shellcheck_clean(tmp_path: Path) -> None:
    script = tmp_path / "bootstrap.sh"
    script.write_text(build_script())
    result = subprocess.run(
        [_tool("shellcheck"), "-s", "bash", str(script)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


def test_nightly_schedule_exists_and_carries_the_nightly_preset() -> None:
    schedule = resources()["NightlySchedule"]["Properties"]
    assert schedule["ScheduleExpression"] == {"Ref": "NightlyScheduleExpression"}
    assert schedule["Target"]["Arn"] == {"Ref": "BuildStateMachine"}
    payload = json.loads(schedule["Target"]["Input"])
    assert payload == {"preset": "nightly"}
    assert parse_request(payload).version == "nightly"  # type: ignore[union-attr]
    assert load_preset("nightly")["channel"] == "nightly"


def test_rules_route_events_to_the_backstop_functions() -> None:
    functions = resources("AWS::Serverless::Function")
    callback = functions["CallbackFunction"]["Properties"]["Events"]
    assert callback["CommandStatus"]["Properties"]["Pattern"]["detail"]["status"] == ["Failed", "TimedOut", "Cancelled"]
    assert callback["SpotInterruption"]["Properties"]["Pattern"]["detail-type"] == [
        "EC2 Spot Instance Interruption Warning"
    ]
    reaper = functions["ReaperFunction"]["Properties"]["Events"]
    assert reaper["ExecutionEnded"]["Properties"]["Pattern"]["detail"]["status"] == ["FAILED", "TIMED_OUT", "ABORTED"]
    assert reaper["Sweep"]["Type"] == "Schedule"


def test_log_groups_have_retention() -> None:
    for group in resources("AWS::Logs::LogGroup").values():
        assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}


def test_handlers_named_by_the_template_exist() -> None:
    import importlib.util

    for name, function in resources("AWS::Serverless::Function").items():
        module, attr = function["Properties"]["Handler"].rsplit(".", 1)
        code_uri = function["Properties"].get("CodeUri", template()["Globals"]["Function"]["CodeUri"])
        source = ROOT / code_uri / (module.replace(".", "/") + ".py")
        assert source.is_file(), f"{name}: {source} is not in its CodeUri"
        spec = importlib.util.spec_from_file_location(f"_handler_{name}", source)
        assert spec and spec.loader
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        assert callable(getattr(loaded, attr)), name


def test_lambda_requirements_lock_the_project_dependencies_and_their_closure() -> None:
    from tools.lock_lambda_requirements import closure, direct_requirements, parse_lock

    # boto3 comes with the Lambda runtime, Powertools with AWS's layer (template.yaml Globals Layers)
    direct = direct_requirements()
    assert direct == [
        "jsonschema",
        "packaging",
        "pyelftools",
    ]  # pyelftools: the merge step reads PyInit_ (wheelfoundry.publishing.elf)
    locked = parse_lock((ROOT / "functions/requirements.txt").read_text())
    # the whole closure at the versions the tests run: a missing or drifted line fails here, not in sam build
    assert {name: version for name, (version, _) in locked.items()} == closure(direct)


def test_codebuild_projects_role_and_rule_are_scoped_to_this_stack() -> None:
    projects = resources("AWS::CodeBuild::Project")
    runtime = projects.pop("RuntimeImageProject")  # runtime images: tests/test_images_pipeline.py
    assert runtime["Properties"]["ServiceRole"] == {"Fn::GetAtt": ["RuntimeImageRole", "Arn"]}
    assert set(projects) == {"CodeBuildProjectX86", "CodeBuildProjectArm64"}
    for project in projects.values():
        props = project["Properties"]
        assert props["Source"]["Type"] == "NO_SOURCE" and props["Environment"]["PrivilegedMode"] is True
        assert props["LogsConfig"]["CloudWatchLogs"]["GroupName"] == {"Ref": "CodeBuildLogGroup"}
        assert props["ServiceRole"] == {"Fn::GetAtt": ["CodeBuildRole", "Arn"]}
        assert "Fn::If" in props["VpcConfig"] and props["VpcConfig"]["Fn::If"][0] == "CodeBuildInVpc"
    assert resources()["CodeBuildLogGroup"]["Properties"]["LogGroupName"] == {
        "Fn::Sub": "/aws/codebuild/${AWS::StackName}-build"
    }
    role = resources()["CodeBuildRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    plain = [s for s in role if "Sid" in s]
    by_sid = {s["Sid"]: s for s in plain}
    reads = json.dumps(by_sid["ReadInputs"]["Resource"])
    assert "runs/*/jobs/*/job.json" in reads and "runs/*/jobs/*/token" in reads and 'runs/*"' not in reads
    writes = by_sid["WriteOutputs"]["Resource"]
    assert all(w["Fn::Sub"].startswith("${WheelBucket.Arn}/runs/*/jobs/*/") for w in writes), writes
    assert "stateMachine:${AWS::StackName}-build" in json.dumps(by_sid["CallBack"]["Resource"])
    for statement in plain:
        if statement["Resource"] == "*":
            assert statement["Sid"] == "BuilderImagesLogin", statement
    rule = resources("AWS::Serverless::Function")["CallbackFunction"]["Properties"]["Events"]["BuildState"]
    pattern = rule["Properties"]["Pattern"]
    assert pattern["detail-type"] == ["CodeBuild Build State Change"]
    assert pattern["detail"]["build-status"] == ["FAILED", "STOPPED", "TIMED_OUT", "FAULT"]
    stack_projects = [{"Ref": "CodeBuildProjectX86"}, {"Ref": "CodeBuildProjectArm64"}, {"Ref": "RuntimeImageProject"}]
    assert pattern["detail"]["project-name"] == stack_projects  # image builds too: BuildImage waits on a token
    # The backstops reach exactly these projects (least privilege), and know the image project by name.
    arns = [{"Fn::GetAtt": [p["Ref"], "Arn"]} for p in stack_projects]
    for name in ("CallbackFunction", "ReaperFunction"):
        props = resources("AWS::Serverless::Function")[name]["Properties"]
        assert props["Environment"]["Variables"]["WF_IMAGE_PROJECT"] == {"Ref": "RuntimeImageProject"}
        codebuild = [s for s in props["Policies"][0]["Statement"] if "codebuild:BatchGetBuilds" in json.dumps(s)]
        assert [s["Resource"] for s in codebuild] == [arns], name
