"""EmbeddedAws lifecycle: the server, environment hygiene, reset, one instance per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from wheelfoundry_local import EmbeddedAws
from wheelfoundry_local.server import MotoServer

from .conftest import TEMPLATE


def test_server_points_this_process_at_itself_and_restores_the_environment() -> None:
    before = dict(os.environ)
    server = MotoServer("eu-west-1")
    server.start()
    try:
        assert os.environ["AWS_ENDPOINT_URL"] == server.endpoint == f"http://127.0.0.1:{server.port}"
        assert os.environ["MOTO_PORT"] == str(server.port)
        assert os.environ["AWS_REGION"] == os.environ["AWS_DEFAULT_REGION"] == "eu-west-1"
        assert "AWS_PROFILE" not in os.environ
    finally:
        server.stop()
    assert dict(os.environ) == before


def test_only_one_instance_per_process(aws: EmbeddedAws, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="another EmbeddedAws"), EmbeddedAws(tmp_path):
        pass
    assert aws.client("s3").list_buckets()["Buckets"] == []  # the active one still works


def test_reset_empties_the_account(aws: EmbeddedAws) -> None:
    stack = aws.deploy(TEMPLATE)
    aws.faults.inject("RedFunction", "X")
    assert aws.invocations.all() and aws.client("s3").list_buckets()["Buckets"]
    aws.reset()
    assert aws.invocations.all() == [] and aws.faults.pending() == {}
    assert aws.client("s3").list_buckets()["Buckets"] == []
    assert aws.client("cloudformation").list_stacks()["StackSummaries"] == []
    assert aws.client("stepfunctions").list_state_machines()["stateMachines"] == []
    assert stack.name == "wheelfoundry"


def test_a_full_session_leaves_the_process_as_it_found_it(tmp_path: Path) -> None:
    """In a fresh interpreter: deploy, run, exit; environment, moto and threads are restored."""
    script = textwrap.dedent(
        f"""
        import json, os, threading
        from moto.awslambda.models import LambdaFunction
        from moto.core.config import default_user_config
        from wheelfoundry_local import EmbeddedAws
        env, runner = dict(os.environ), LambdaFunction._invoke_lambda
        config = json.dumps(default_user_config, sort_keys=True)
        with EmbeddedAws({str(tmp_path)!r}) as aws:
            stack = aws.deploy({str(TEMPLATE)!r})
            result = aws.wait_execution(aws.start_execution(stack.state_machine("ColorsMachine"), {{"items": [1]}}))
            inside = os.environ["AWS_ENDPOINT_URL"]
        print(json.dumps({{
            "status": result.status,
            "inside": inside,
            "env_restored": dict(os.environ) == env,
            "runner_restored": LambdaFunction._invoke_lambda is runner,
            "config_restored": json.dumps(default_user_config, sort_keys=True) == config,
            "threads": sorted(t.name for t in threading.enumerate() if t.name.startswith("wf-")),
        }}))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_"))}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["status"] == "SUCCEEDED"
    assert report["inside"].startswith("http://127.0.0.1:")
    assert report["env_restored"] and report["runner_restored"] and report["config_restored"]
    assert report["threads"] == []


def test_a_definition_is_parsed_once_and_each_execution_gets_its_own_components(
    aws: EmbeddedAws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto parses the ASL per execution (ANTLR in Python, about a second each); the emulator keeps the tree."""
    from moto.stepfunctions.parser.asl.antlr.runtime.ASLParser import ASLParser
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    parses = []
    real = ASLParser.state_machine

    def counted(parser: Any) -> Any:
        parses.append(1)
        return real(parser)

    monkeypatch.setattr(ASLParser, "state_machine", counted)
    definition = json.dumps(
        {"Comment": f"memo {uuid.uuid4()}", "StartAt": "P", "States": {"P": {"Type": "Pass", "Result": 1, "End": True}}}
    )
    programs = [AmazonStateLanguageParser.parse(definition)[0] for _ in range(3)]
    assert len(parses) == 1
    assert len({id(p) for p in programs}) == 3, "every execution evaluates its own components"
    sfn = aws.client("stepfunctions")
    role = "arn:aws:iam::123456789012:role/memo"
    arn = sfn.create_state_machine(name=f"memo-{uuid.uuid4().hex[:8]}", definition=definition, roleArn=role)[
        "stateMachineArn"
    ]
    results = [aws.wait_execution(aws.start_execution(arn, {}), timeout=30) for _ in range(2)]
    assert [r.status for r in results] == ["SUCCEEDED", "SUCCEEDED"]
    assert [r.output for r in results] == [1, 1]
    assert len(parses) == 1


def test_tag_filters_find_instances_without_scanning_every_tag(
    aws: EmbeddedAws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto scanned the account's whole tag table per resource and filter: Launch's look-up grew with the square."""
    from moto.ec2.models.tags import TagBackend

    ec2 = aws.client("ec2")
    image = ec2.describe_images()["Images"][0]["ImageId"]
    ids = []
    for n in range(3):
        spec = [
            {"ResourceType": "instance", "Tags": [{"Key": "wf:test", "Value": f"v{n}"}, {"Key": "k", "Value": "x"}]}
        ]
        ids.append(
            ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, TagSpecifications=spec)["Instances"][0][
                "InstanceId"
            ]
        )
    try:
        scans = []
        real = TagBackend.describe_tags
        monkeypatch.setattr(
            TagBackend, "describe_tags", lambda backend, filters=None: scans.append(1) or real(backend, filters)
        )
        found = ec2.describe_instances(
            Filters=[{"Name": "tag:wf:test", "Values": ["v1"]}, {"Name": "tag:k", "Values": ["x"]}]
        )
        got = [i for r in found["Reservations"] for i in r["Instances"]]
        assert [i["InstanceId"] for i in got] == [ids[1]]
        assert {t["Key"]: t["Value"] for t in got[0]["Tags"]} == {"wf:test": "v1", "k": "x"}
        assert scans == [], "a resource's tags are read by its id"
    finally:
        ec2.terminate_instances(InstanceIds=ids)


def test_a_jsonpath_is_parsed_once_however_many_executions_evaluate_it(
    aws: EmbeddedAws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto's interpreter parsed every JSONPath at every evaluation, building jsonpath_ng's PLY tables each time."""
    from jsonpath_ng.parser import JsonPathParser

    built = []
    real = JsonPathParser.__init__

    def counted(parser: Any, *args: Any, **kwargs: Any) -> None:
        built.append(1)
        real(parser, *args, **kwargs)

    monkeypatch.setattr(JsonPathParser, "__init__", counted)
    tag = uuid.uuid4().hex[:8]
    states = {
        "P": {
            "Type": "Pass",
            "InputPath": f"$.in_{tag}",
            "Parameters": {"v.$": f"$.value_{tag}"},
            "ResultPath": f"$.out_{tag}",
            "End": True,
        }
    }
    definition = json.dumps({"StartAt": "P", "States": states})
    sfn = aws.client("stepfunctions")
    arn = sfn.create_state_machine(
        name=f"jp-{tag}", definition=definition, roleArn="arn:aws:iam::123456789012:role/jp"
    )["stateMachineArn"]
    outputs, counts = [], []
    for n in range(3):
        result = aws.wait_execution(aws.start_execution(arn, {f"in_{tag}": {f"value_{tag}": n}}), timeout=30)
        assert result.status == "SUCCEEDED", result.cause
        outputs.append(result.output[f"out_{tag}"]["v"])
        counts.append(len(built))
    assert outputs == [0, 1, 2]
    assert counts[0] > 0, "the executions parsed no JSONPath: the test proves nothing"
    assert counts[2] == counts[0], f"later executions parsed their paths again: {counts}"


def test_lambda_tasks_share_one_client_per_service(aws: EmbeddedAws) -> None:
    """moto built a new boto3 client for every Lambda task it ran (tens of ms of CPU each)."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils
    from moto.stepfunctions.parser.asl.utils import boto_client

    first = lambda_eval_utils.boto_client_for("us-east-1", "lambda")
    assert lambda_eval_utils.boto_client_for("us-east-1", "lambda") is first
    assert boto_client.boto_client_for("us-east-1", "lambda") is first
    assert boto_client.boto_client_for("eu-west-1", "lambda") is not first
