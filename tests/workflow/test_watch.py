"""The watcher in the shipped stack (embedded AWS): `wheelfoundry subscribe`, the WatchSchedule's tick against
the recorded indexes (served on 127.0.0.1 as the stack's UpstreamPypiUrl / UpstreamPytorchIndexUrl), exactly
one execution for exactly the cells the channel lacks, the maintainer's notice through WatchTopic, and a
second tick that starts nothing. The run is stopped at Launch (a fault), so no build runs here."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from wheelfoundry_cli.main import main

from tests.test_watch_stack import sdist
from tests.watch_support import RECORDED, state
from tests.workflow.conftest import served
from wheelfoundry.publishing.index import publish_index
from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_local.testing import assert_no_builds, assert_no_instances, aws, embedded_aws  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[str]:
    """The recorded indexes plus wf-tiny-ext 0.1.0's page and sdist, served as http://127.0.0.1:<port>/<host>/..."""
    root = tmp_path / "upstream"
    shutil.copytree(RECORDED, root)
    body = sdist()
    (root / "files").mkdir()
    (root / "files/wf_tiny_ext-0.1.0.tar.gz").write_bytes(body)
    with served(root) as url:
        page = root / "pypi.org/simple/wf-tiny-ext/index.json"
        page.parent.mkdir(parents=True)
        files = [{"filename": "wf_tiny_ext-0.1.0.tar.gz", "url": f"{url}/files/wf_tiny_ext-0.1.0.tar.gz",
                  "hashes": {"sha256": hashlib.sha256(body).hexdigest()}}]  # fmt: skip
        page.write_text(json.dumps({"files": files}))
        yield url


@pytest.fixture
def stack(aws: EmbeddedAws, upstream: str) -> Iterator[DeployedStack]:  # noqa: F811
    parameters = {
        "UpstreamPypiUrl": f"{upstream}/pypi.org/",
        "UpstreamPytorchIndexUrl": f"{upstream}/download.pytorch.org/whl/",
    }
    yield aws.deploy(ROOT / "template.yaml", parameters)
    assert_no_instances(aws)
    assert_no_builds(aws)


def wf(aws: EmbeddedAws, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:  # noqa: F811
    capsys.readouterr()
    code = main([*args, "--endpoint-url", aws.endpoint])
    return code, capsys.readouterr().out


def test_a_tick_starts_one_run_for_exactly_the_missing_cells_and_the_next_starts_nothing(
    aws: EmbeddedAws,  # noqa: F811
    stack: DeployedStack,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    bucket, sfn = stack.outputs["WheelBucketName"], aws.client("stepfunctions")
    subscription = tmp_path / "sub.json"  # both jobs on EC2, where the Launch fault stops them before a build
    subscription.write_text(json.dumps({"options": {"executor": "ec2"}}))
    code, _ = wf(aws, capsys, "subscribe", "--subscription", str(subscription), "--package", "wf-tiny-ext",
                 "--pypi", "latest", "--torch", ">=2.14", "--cuda", "cpu,13.0", "--python", "3.12", "--channel", "ci",
                 "--notify", "maintainer@example.org")  # fmt: skip
    assert code == 0
    sns = aws.client("sns")
    (mail,) = sns.list_subscriptions_by_topic(TopicArn=stack.outputs["WatchTopicArn"])["Subscriptions"]
    attributes = sns.get_subscription_attributes(SubscriptionArn=mail["SubscriptionArn"])["Attributes"]
    assert mail["Endpoint"] == "maintainer@example.org"
    assert json.loads(attributes["FilterPolicy"]) == {"subscription": ["wf-tiny-ext"]}
    # the channel already serves torch 2.14's cells, published as a run would; torch 2.15.0 is new
    s3 = aws.client("s3")
    published = state("wf-tiny-ext", "0.1.0", [("2.14.1", v, "3.12", "x86_64") for v in ("cpu", "13.0")], "ci")
    for key, entry in published["wheels"].items():
        metadata = {"sha256": "0" * 64, "wf-variants": entry["variants"][0]}
        s3.put_object(Bucket=bucket, Key=key, Body=b"wheel", Metadata=metadata)
    publish_index(s3, bucket, "ci")
    sqs = aws.client("sqs")
    queue = sqs.create_queue(QueueName="maintainer")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=stack.outputs["WatchTopicArn"], Protocol="sqs", Endpoint=arn)
    aws.faults.inject("LaunchFunction", "LaunchFailed", times=2)  # the run's two jobs stop at Launch

    aws.events.fire_schedule(stack.schedule_name("WatchSchedule"))
    (execution,) = sfn.list_executions(stateMachineArn=stack.state_machine_arn)["executions"]
    result = aws.wait_execution(execution["executionArn"], timeout=120)
    missing = {("2.15.0", "cpu"), ("2.15.0", "13.0")}  # x Python 3.12 x x86_64
    (validate,) = aws.invocations.of("ValidateFunction")
    cells = {
        (c["torch_version"], c.get("cuda") or "cpu") for j in validate.result["jobs"] for c in _cells(aws, bucket, j)
    }
    assert cells == missing
    assert result.input["torch"] == ["2.15.0"] and result.input["layout"] == "per-cell"
    assert execution["name"].startswith("w-wf-tiny-ext-0-1-0-pt215-")
    assert result.status == "FAILED" and "LaunchFailed" in (result.cause or "")
    (message,) = [
        json.loads(m["Body"]) for m in sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
    ]
    assert message["Subject"] == "WheelFoundry wf-tiny-ext: 0/2 cells built, FAILED"
    assert message["MessageAttributes"]["subscription"]["Value"] == "wf-tiny-ext"
    assert "why it ran: torch 2.15.0 released" in message["Message"] and "LaunchFailed" in message["Message"]

    aws.events.fire_schedule(stack.schedule_name("WatchSchedule"))  # the same cells: the same name
    assert len(sfn.list_executions(stateMachineArn=stack.state_machine_arn)["executions"]) == 1
    assert not any(i.function_name.startswith(f"{stack.name}-StartBuild") for i in aws.invocations.all())
    code, out = wf(aws, capsys, "subscriptions", "list")
    assert code == 0 and f"already started (FAILED) {execution['name']}" in out
    code, out = wf(aws, capsys, "local", "watch", "--recorded", str(tmp_path / "upstream"))  # a tick from here
    assert code == 0 and f"already started (FAILED): {execution['name']} (torch 2.15.0 released)" in out
    assert len(sfn.list_executions(stateMachineArn=stack.state_machine_arn)["executions"]) == 1
    _, out = wf(aws, capsys, "status", execution["name"])  # the run, then the subscriptions and the last tick
    assert "subscriptions (last watcher tick: " in out and f"already started (FAILED) {execution['name']}" in out


def _cells(aws: EmbeddedAws, bucket: str, job: dict[str, Any]) -> list[dict[str, Any]]:  # noqa: F811
    contract = json.loads(aws.client("s3").get_object(Bucket=bucket, Key=job["job_key"])["Body"].read())
    return list(contract["extension"]["cells"])
