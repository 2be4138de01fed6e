"""Release day without a compile (issue 66 item 4) on the shipped stack (embedded AWS), with real test jobs.

tests/fixtures/stable_ext is built once for torch 2.13 (``abi: stable``, CPU, Python 3.11) and published as
``wf_stable-0.1.0+abi213cpu``. A maintainer then subscribes to it for torch >=2.13,<2.15; upstream (recorded,
tests/fixtures/watch) has torch 2.14.1, which the channel does not serve yet. One WatchSchedule tick starts a
retest: no build job, the published wheel's exact bytes installed and tested in torch 2.14.1's environment. It
passes, so the same bytes are listed on torch 2.14.1's page, a signed in-toto test result names the cell, and the
maintainer's notice says "served, no build" with the minutes. The next tick starts nothing.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from tests.workflow.conftest import explained, extension_request, run, s3_json, s3_keys
from tests.workflow.test_release_day import maintainer_queue
from tests.workflow.test_stable_abi import _source
from tests.workflow.test_watch import stack, upstream, wf  # noqa: F401  (the stack on the recorded indexes)
from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_local.demo import pack_source
from wheelfoundry_local.testing import aws, embedded_aws  # noqa: F401

pytestmark = pytest.mark.heavy  # real test jobs through the state machine: `make test-heavy` (.ci/heavy)
ROOT = Path(__file__).resolve().parents[2]
NEW = "torch2.14.1-cp311-cpu-x86_64"


def test_a_new_torch_is_served_by_testing_the_published_stable_wheel_with_no_build(
    aws: EmbeddedAws,  # noqa: F811
    stack: DeployedStack,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    s3, sfn, bucket = aws.client("s3"), aws.client("stepfunctions"), stack.outputs["WheelBucketName"]
    source = "sources/wf-stable-0.1.0.tar.gz"
    s3.put_object(Bucket=bucket, Key=source, Body=pack_source(_source(tmp_path), "wf-stable"))
    first = extension_request(f"s3://{bucket}/{source}", name="wf-stable", torch=["2.13"], abi="stable")
    built = run(aws, stack, first, timeout=1200)
    assert built.succeeded, explained(aws, stack, built)
    (key,) = [k for k in s3_keys(aws, stack, "wheels/ci/wf-stable/") if k.endswith(".whl")]
    name = key.rsplit("/", 1)[1]
    assert name.startswith("wf_stable-0.1.0+abi213cpu-cp311-cp311-"), name
    sha = hashlib.sha256(s3.get_object(Bucket=bucket, Key=key)["Body"].read()).hexdigest()
    assert s3.head_object(Bucket=bucket, Key=key)["Metadata"]["wf-variants"] == "torch-2.13.0+cpu"

    fields = tmp_path / "sub.json"
    fields.write_text(json.dumps({"source": {"s3": f"s3://{bucket}/{source}"}, "abi": "stable",
                                  "torch_index": "pip", "options": {"executor": "ec2"}}))  # fmt: skip
    code, out = wf(aws, capsys, "subscribe", "--subscription", str(fields), "--package", "wf-stable", "--torch",
                   ">=2.13,<2.15", "--cuda", "cpu", "--python", "3.11", "--channel", "ci",
                   "--notify", "maintainer@example.org")  # fmt: skip
    assert code == 0, out
    queue = maintainer_queue(aws, stack)
    aws.events.fire_schedule(stack.schedule_name("WatchSchedule"))
    tick = s3_json(aws, stack, "watch/last-tick.json")
    (planned,) = tick["runs"]
    assert planned["request"]["retest"] == [key] and planned["request"]["torch"] == ["2.14.1"], planned
    assert planned["jobs"] == {} and planned["tests"] == 1 and "with no build" in planned["reason"], planned
    executions = sfn.list_executions(stateMachineArn=stack.state_machine_arn)["executions"]
    (retest,) = [e for e in executions if e["name"] == planned["name"]]
    result = aws.wait_execution(retest["executionArn"], timeout=1200)
    assert result.succeeded, explained(aws, stack, result)

    run_id = planned["name"]
    jobs = {k.split("/")[3] for k in s3_keys(aws, stack, f"runs/{run_id}/jobs/")}
    assert jobs == {"wf-stable-test-cp311-x86_64"}, jobs  # no build job: the test job alone
    tested = s3_json(aws, stack, f"runs/{run_id}/jobs/wf-stable-test-cp311-x86_64/manifest.json")
    assert [(w["name"], w["sha256"], w["tested_cells"]) for w in tested["wheels"]] == [(name, sha, [NEW])], tested
    assert hashlib.sha256(s3.get_object(Bucket=bucket, Key=key)["Body"].read()).hexdigest() == sha  # same bytes
    assert s3.head_object(Bucket=bucket, Key=key)["Metadata"]["wf-variants"] == "torch-2.13.0+cpu"  # untouched
    assert s3_keys(aws, stack, f"{key}.served/") == [f"{key}.served/torch-2.14.1+cpu"]  # publishing.served
    variants = s3_json(aws, stack, "simple/ci/.index-state.json")["wheels"][key]["variants"]
    assert variants == ["torch-2.13.0+cpu", "torch-2.14.1+cpu"], variants
    for page in ("torch-2.13.0+cpu", "torch-2.14.1+cpu"):
        assert name in s3.get_object(Bucket=bucket, Key=f"simple/ci/{page}.html")["Body"].read().decode(), page
    envelope = s3_json(aws, stack, f"{key}.tests/{run_id}.json")
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["subject"] == [{"name": name, "digest": {"sha256": sha}}]
    assert statement["predicateType"] == "https://in-toto.io/attestation/test-result/v0.1"
    assert statement["predicate"]["result"] == "PASSED" and statement["predicate"]["passedTests"] == [NEW]
    provenance = json.loads(base64.b64decode(s3_json(aws, stack, f"{key}.provenance.json")["payload"]))
    assert provenance["predicate"]["runDetails"]["metadata"]["invocationId"] == built.arn  # still the build's
    report = s3_json(aws, stack, f"runs/{run_id}/report.json")
    assert report["provenance"]["tested"] == [name] and isinstance(report["release_day"]["minutes"], float)
    (message,) = [json.loads(m["Body"]) for m in
                  aws.client("sqs").receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]]  # fmt: skip
    assert message["Subject"].startswith("WheelFoundry wf-stable: torch 2.14.1 served, no build in "), message
    assert f"{name}: passed; listed for torch 2.14.1" in message["Message"], message["Message"]

    aws.events.fire_schedule(stack.schedule_name("WatchSchedule"))  # the channel serves torch 2.14 now
    again = s3_json(aws, stack, "watch/last-tick.json")
    assert again["runs"] == [], again
    assert len(sfn.list_executions(stateMachineArn=stack.state_machine_arn)["executions"]) == 2
