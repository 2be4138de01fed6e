"""The watcher's tick on a stack (wheelfoundry.aws.watch) with moto's S3 and Step Functions: what it starts,
that a second tick starts nothing, the sdist it copies, what it writes; and Validate with the derived facts."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
from wheelfoundry_cli.watch_local import recorded

from tests.watch_support import LOCKS, RECORDED, state
from wheelfoundry.aws.runs import ValidateSettings, validate
from wheelfoundry.aws.watch import Sources, WatchSettings, run_tick
from wheelfoundry.config import load_config
from wheelfoundry.errors import RequestInvalid
from wheelfoundry.planning.jobs import StackContext

BUCKET = "wf-bucket"
SUB = {"package": "wf-tiny-ext", "source": {"pypi": "latest"}, "torch": ">=2.14", "cuda": ["cpu", "13.0"],
       "python": ["3.12"], "channel": "ci"}  # fmt: skip
NOW = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)


def sdist() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        data = b"from setuptools import setup\nsetup()\n"
        info = tarfile.TarInfo("wf_tiny_ext-0.1.0/setup.py")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def recording(tmp_path: Path, body: bytes, listed_sha: str | None = None) -> Path:
    """The recorded torch pages plus a PyPI page for wf-tiny-ext 0.1.0 and its sdist."""
    root = tmp_path / "upstream"
    shutil.copytree(RECORDED, root)
    page = root / "pypi.org/simple/wf-tiny-ext/index.json"
    page.parent.mkdir(parents=True)
    sha = listed_sha or hashlib.sha256(body).hexdigest()
    url = "https://files.example.org/packages/wf_tiny_ext-0.1.0.tar.gz"
    page.write_text(
        json.dumps({"files": [{"filename": "wf_tiny_ext-0.1.0.tar.gz", "url": url, "hashes": {"sha256": sha}}]})
    )
    (root / "files.example.org/packages").mkdir(parents=True)
    (root / "files.example.org/packages/wf_tiny_ext-0.1.0.tar.gz").write_bytes(body)
    return root


@pytest.fixture
def aws() -> Iterator[tuple[Any, Any, str]]:
    import boto3
    from moto import mock_aws

    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        sfn = boto3.client("stepfunctions", region_name="us-east-1")
        machine = sfn.create_state_machine(
            name="wf-build",
            definition=json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}),
            roleArn="arn:aws:iam::123456789012:role/wf",
        )["stateMachineArn"]
        pins = {"pins": {"cuda": {k: {"compiler": v} for k, v in LOCKS.items()}}, "key": "bundles/b.zip"}
        s3.put_object(Bucket=BUCKET, Key="bundles/current.json", Body=json.dumps(pins))
        s3.put_object(Bucket=BUCKET, Key="subscriptions/wf-tiny-ext.json", Body=json.dumps(SUB))
        yield s3, sfn, machine


def settings(machine: str, **changes: Any) -> WatchSettings:
    return WatchSettings(BUCKET, machine, load_config(), StackContext(BUCKET, "us-east-1"), Sources(), **changes)


def executions(sfn: Any, machine: str) -> list[dict[str, Any]]:
    return list(sfn.list_executions(stateMachineArn=machine)["executions"])


def test_a_tick_starts_the_run_once_and_the_next_tick_starts_nothing(aws: Any, tmp_path: Path) -> None:
    s3, sfn, machine = aws
    body = sdist()
    fetch = recorded(recording(tmp_path, body))
    first = run_tick(s3, sfn, fetch, settings(machine), NOW)
    (run,) = first["runs"]
    assert run["status"] == "started" and run["cells"] == 4  # 2.14.1 and 2.15.0 x cpu, 13.0 x 3.12
    (execution,) = executions(sfn, machine)
    assert execution["name"] == run["name"]
    started = json.loads(sfn.describe_execution(executionArn=execution["executionArn"])["input"])
    assert started["source"] == {"s3": f"s3://{BUCKET}/sources/pypi/wf-tiny-ext/wf_tiny_ext-0.1.0.tar.gz"}
    copied = s3.get_object(Bucket=BUCKET, Key="sources/pypi/wf-tiny-ext/wf_tiny_ext-0.1.0.tar.gz")
    assert copied["Body"].read() == body and copied["Metadata"]["sha256"] == hashlib.sha256(body).hexdigest()
    record = json.loads(s3.get_object(Bucket=BUCKET, Key=f"watch/runs/{run['name']}.json")["Body"].read())
    assert record["subscription"] == "wf-tiny-ext" and len(record["cells"]) == 4
    derived = json.loads(s3.get_object(Bucket=BUCKET, Key="watch/derived.json")["Body"].read())
    assert [r["torch"] for r in derived["releases"]] == ["2.15"]
    again = run_tick(s3, sfn, fetch, settings(machine), NOW)
    (status,) = [r["status"] for r in again["runs"]]  # RUNNING, or SUCCEEDED where moto ran the Pass machine
    assert status in ("already started (RUNNING)", "already started (SUCCEEDED)")
    assert len(executions(sfn, machine)) == 1
    tick = json.loads(s3.get_object(Bucket=BUCKET, Key="watch/last-tick.json")["Body"].read())
    assert tick["subscriptions"]["wf-tiny-ext"]["starts"] == [run["name"]]
    # once the run published its cells, a tick has nothing to start
    cells = [(c["torch"], c["cuda"], c["python"], c["platform"]) for c in record["cells"]]
    s3.put_object(
        Bucket=BUCKET, Key="simple/ci/.index-state.json", Body=json.dumps(state("wf-tiny-ext", "0.1.0", cells, "ci"))
    )
    done = run_tick(s3, sfn, fetch, settings(machine), NOW)
    assert done["runs"] == [] and done["subscriptions"]["wf-tiny-ext"]["missing"] == 0


def test_an_sdist_whose_bytes_pypi_does_not_list_is_not_used(aws: Any, tmp_path: Path) -> None:
    s3, sfn, machine = aws
    fetch = recorded(recording(tmp_path, sdist(), listed_sha="0" * 64))
    (run,) = run_tick(s3, sfn, fetch, settings(machine), NOW)["runs"]
    assert run["status"].startswith("not started: the sdist could not be copied") and "PyPI lists 0000" in run["status"]
    assert executions(sfn, machine) == []
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix="sources/")


def test_a_dry_run_starts_and_writes_nothing(aws: Any, tmp_path: Path) -> None:
    s3, sfn, machine = aws
    before = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]}
    (run,) = run_tick(s3, sfn, recorded(recording(tmp_path, sdist())), settings(machine, dry_run=True), NOW)["runs"]
    assert run["status"] == "would start" and run["request"]["torch"] == ["2.14.1", "2.15.0"]
    assert {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]} == before
    assert executions(sfn, machine) == []


def test_runs_past_the_per_tick_limit_wait_for_the_next_tick(aws: Any, tmp_path: Path) -> None:
    s3, sfn, machine = aws
    (run,) = run_tick(s3, sfn, recorded(recording(tmp_path, sdist())), settings(machine, max_starts=0), NOW)["runs"]
    assert run["status"].startswith("deferred: a tick starts at most 0 run(s)") and executions(sfn, machine) == []


def test_pypi_unreachable_is_recorded_not_raised(aws: Any, tmp_path: Path) -> None:
    s3, sfn, machine = aws
    record = run_tick(s3, sfn, recorded(tmp_path / "empty"), settings(machine), NOW)
    assert record["runs"] == [] and record["problems"][0].startswith("PyPI's torch page not read")
    assert json.loads(s3.get_object(Bucket=BUCKET, Key="watch/last-tick.json")["Body"].read())["problems"]


def test_without_subscriptions_nothing_upstream_is_read(aws: Any) -> None:
    s3, sfn, machine = aws
    s3.delete_object(Bucket=BUCKET, Key="subscriptions/wf-tiny-ext.json")

    def no_fetch(url: str, headers: Any) -> bytes:
        raise AssertionError(f"fetched {url}")

    assert run_tick(s3, sfn, no_fetch, settings(machine), NOW)["runs"] == []


def test_a_broken_subscription_is_named_and_the_rest_followed(aws: Any, tmp_path: Path) -> None:
    s3, sfn, machine = aws
    s3.put_object(Bucket=BUCKET, Key="subscriptions/bad.json", Body=json.dumps({"package": "x", "torch": "2.11"}))
    record = run_tick(s3, sfn, recorded(recording(tmp_path, sdist())), settings(machine), NOW)
    assert any(p.startswith("subscriptions/bad.json: not followed") for p in record["problems"])
    assert [r["status"] for r in record["runs"]] == ["started"]


def test_validate_takes_a_torch_release_the_catalog_lacks_only_with_the_watchers_facts(
    aws: Any, tmp_path: Path
) -> None:
    s3, sfn, machine = aws
    request = {"framework": "extension", "name": "wf-tiny-ext", "torch": ["2.15.0"], "cuda": ["cpu", "13.0"],
               "python": ["3.12"], "source": {"s3": f"s3://{BUCKET}/sources/wf_tiny_ext-0.1.0.tar.gz"}}  # fmt: skip
    event = {"request": request, "name": "r1", "execution": "arn:aws:states:us-east-1:1:execution:wf-build:r1"}
    checks = ValidateSettings(BUCKET, "us-east-1", "", 24, 250.0, 900, 10, container_builds=False)
    with pytest.raises(RequestInvalid, match=r"torch 2\.15 is not in the compatibility catalog"):
        validate(event, s3, checks, date(2026, 11, 27))
    run_tick(s3, sfn, recorded(recording(tmp_path, sdist())), settings(machine), NOW)  # writes watch/derived.json
    out = validate(event, s3, checks, date(2026, 11, 27))
    assert {j["id"] for j in out["jobs"]} == {"wf-tiny-ext-cpu-x86_64", "wf-tiny-ext-cuda13.0-x86_64"}
    with pytest.raises(RequestInvalid, match=r"Python 3\.10 is not supported by torch 2\.15\.0"):
        validate({**event, "request": {**request, "python": ["3.10"]}}, s3, checks, date(2026, 11, 27))
