"""Issue 64's release day on the shipped stack (embedded AWS), with a real package and a real CUDA build.

The deployment's bundle has no CUDA 13.0 lock for x86_64 (as this checkout has none for torch 2.15's 13.2), a
maintainer subscribes to torchsort 0.1.10 (a real PyPI package of examples/corpus) for torch 2.14's cu130 build,
and upstream is recorded: torch's pages (tests/fixtures/watch), NVIDIA's CUDA 13.0 pages and torchsort's page
(tests/fixtures/release_day), served on 127.0.0.1 as the stack's UpstreamPypiUrl / UpstreamPytorchIndexUrl. Their
files are PyPI's own, each read by its sha256. One WatchSchedule tick locks the toolkit; its run builds the cell with
that lock's nvcc, tests the published bytes, signs, publishes and notifies; the next tick starts nothing. Without
the lock step the cell is left out, nothing is started, and this test fails at the first execution it looks for.
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.watch_support import RECORDED
from tests.workflow.conftest import explained, s3_json, s3_keys, served
from tests.workflow.test_merged import hide_system_cuda
from tests.workflow.test_watch import wf
from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_local.testing import assert_no_builds, assert_no_instances, aws, embedded_aws  # noqa: F401

pytestmark = pytest.mark.heavy  # a whole run with a real CUDA build: `make test-heavy` (.ci/heavy), not `make test`

ROOT = Path(__file__).resolve().parents[2]
RELEASE_DAY = ROOT / "tests" / "fixtures" / "release_day"
CELL = "torch2.14.1-cp311-cuda13.0-x86_64"
# torchsort 0.1.10's sdist on PyPI (examples/corpus/corpus.toml pins the same sha256)
TORCHSORT_SHA256 = "416a7dd2ab88332b27e98318d7fb2e0243b9fb6f1fffcf77760d63103d70dd04"


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "upstream"
    shutil.copytree(RECORDED, root)
    shutil.copytree(RELEASE_DAY, root, dirs_exist_ok=True)
    with served(root) as url:
        yield url


@pytest.fixture
def stack(aws: EmbeddedAws, upstream: str) -> Iterator[DeployedStack]:  # noqa: F811
    aws.registration.delay = 0.0
    parameters = {
        "UpstreamPypiUrl": f"{upstream}/pypi.org/",
        "UpstreamPytorchIndexUrl": f"{upstream}/download.pytorch.org/whl/",
        "BuildHeartbeatSeconds": "60",
    }
    deployed = aws.deploy(ROOT / "template.yaml", parameters)
    pointer = s3_json(aws, deployed, "bundles/current.json")  # a bundle without the CUDA 13.0 x86_64 lock
    del pointer["pins"]["cuda"]["13.0-x86_64"]
    bucket = deployed.outputs["WheelBucketName"]
    aws.client("s3").put_object(Bucket=bucket, Key="bundles/current.json", Body=json.dumps(pointer).encode())
    yield deployed
    assert_no_instances(aws)
    assert_no_builds(aws)


def maintainer_queue(aws: EmbeddedAws, stack: DeployedStack) -> str:  # noqa: F811
    """An SQS queue on WatchTopic: what the maintainer's mail would say."""
    sqs = aws.client("sqs")
    queue = sqs.create_queue(QueueName="maintainer")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    aws.client("sns").subscribe(TopicArn=stack.outputs["WatchTopicArn"], Protocol="sqs", Endpoint=arn)
    return str(queue)


def test_one_tick_locks_the_toolkit_builds_with_it_and_publishes_and_the_next_starts_nothing(
    aws: EmbeddedAws,  # noqa: F811
    stack: DeployedStack,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hide_system_cuda(monkeypatch)  # only the toolkit the lock installs can compile the cell
    s3, sfn, bucket = aws.client("s3"), aws.client("stepfunctions"), stack.outputs["WheelBucketName"]
    assert "13.0-x86_64" not in s3_json(aws, stack, "bundles/current.json")["pins"]["cuda"]
    fields = tmp_path / "sub.json"  # the cu130 cell on EC2, for Hopper only (one architecture: a short compile)
    fields.write_text(json.dumps({"options": {"executor": "ec2"}, "arch_list": "9.0", "torch_index": "pip"}))
    code, out = wf(aws, capsys, "subscribe", "--subscription", str(fields), "--package", "torchsort", "--pypi",
                   "0.1.10", "--torch", ">=2.14,<2.15", "--cuda", "13.0", "--python", "3.11", "--channel", "ci",
                   "--notify", "maintainer@example.org")  # fmt: skip
    assert code == 0, out
    queue = maintainer_queue(aws, stack)

    aws.events.fire_schedule(stack.schedule_name("WatchSchedule"))
    tick = s3_json(aws, stack, "watch/last-tick.json")
    assert len(tick["toolkits"]) == 1, json.dumps(tick, indent=1)[:4000]
    (locked,) = tick["toolkits"]  # the lock the tick wrote, before it planned the cell
    assert (locked["cuda"], locked["platform"]) == ("13.0", "x86_64"), tick
    record = s3_json(aws, stack, "toolkits/index.json")
    entry = record["toolkits"]["13.0-x86_64"]
    assert entry["key"] == locked["key"] and entry["sha256"] == locked["sha256"] and entry["approved"] is True
    lock_text = s3.get_object(Bucket=bucket, Key=entry["key"])["Body"].read().decode()
    assert 'name = "nvidia-cuda-nvcc"' in lock_text and "files.pythonhosted.org" in lock_text
    (execution,) = sfn.list_executions(stateMachineArn=stack.state_machine_arn)["executions"]
    result = aws.wait_execution(execution["executionArn"], timeout=1800)
    assert result.succeeded, explained(aws, stack, result)

    run_id = execution["executionArn"].rsplit(":", 1)[1]
    (job,) = [k for k in s3_keys(aws, stack, f"runs/{run_id}/jobs/") if k.endswith("-cuda13.0-x86_64/manifest.json")]
    manifest = s3_json(aws, stack, job)
    toolkit = manifest["toolchain"]["cuda_toolkit"]  # the compiler came from the watcher's lock, byte-checked
    assert manifest["toolkit_lock"] == {"key": entry["key"], "sha256": entry["sha256"]}
    assert toolkit["lock_sha256"] == entry["sha256"] and toolkit["release"] == locked["release"]
    assert "nvidia-cuda-nvcc==" in " ".join(toolkit["wheels"])
    files = manifest["device_code"][CELL]["files"]  # torchsort's CUDA module holds Hopper's SASS from that nvcc
    assert {n.split(".")[0]: held["sass"] for n, held in files.items()} == {
        "torchsort/isotonic_cpu": [],
        "torchsort/isotonic_cuda": ["sm_90"],
    }, files

    (wheel,) = [k for k in s3_keys(aws, stack, "wheels/ci/torchsort/") if k.endswith(".whl")]
    filename = wheel.rsplit("/", 1)[1]
    assert filename.startswith("torchsort-0.1.10") and "-cp311-cp311-manylinux" in filename, filename
    envelope = s3_json(aws, stack, wheel + ".provenance.json")
    statement = json.loads(base64.b64decode(envelope["payload"]))
    deps = {d["name"]: d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert deps["cuda-toolkit-lock"] == {
        "name": "cuda-toolkit-lock",
        "uri": f"s3://{bucket}/{entry['key']}",
        "digest": {"sha256": entry["sha256"]},
    }
    assert deps["torchsort"]["digest"] == {"sha256": TORCHSORT_SHA256}
    report = s3_json(aws, stack, f"runs/{run_id}/report.json")
    assert report["status"] == "succeeded" and report["missing_cells"] == []
    # the published bytes, installed into the cell's torch environment as a user gets them, before signing
    tested = s3_json(aws, stack, f"runs/{run_id}/jobs/torchsort-test-cp311-x86_64/manifest.json")
    assert [(w["name"], w["smoke"]) for w in tested["wheels"]] == [(filename, "passed")], tested
    assert report["release_day"]["cells"] == {CELL: "published"}
    assert report["release_day"]["toolkits"][0]["sha256"] == entry["sha256"]
    assert isinstance(report["release_day"]["minutes"], float)
    (message,) = [
        json.loads(m["Body"])
        for m in aws.client("sqs").receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
    ]
    assert message["Subject"] == "WheelFoundry torchsort: 1/1 cells built, succeeded"
    assert f"toolkit locked by the watcher for it: CUDA 13.0 x86_64 (release {locked['release']})" in message["Message"]
    assert f"sha256 {entry['sha256']}" in message["Message"] and f"{CELL}: published" in message["Message"]

    aws.events.fire_schedule(stack.schedule_name("WatchSchedule"))  # the channel now serves the cell
    assert len(sfn.list_executions(stateMachineArn=stack.state_machine_arn)["executions"]) == 1
    again = s3_json(aws, stack, "watch/last-tick.json")
    assert again["toolkits"] == [] and again["runs"] == [], again
    assert s3_json(aws, stack, "toolkits/index.json") == record  # nothing locked twice
    code, out = wf(aws, capsys, "subscriptions", "list")
    assert code == 0 and "torchsort" in out
