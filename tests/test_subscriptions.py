"""Subscriptions: checked by the request schema's own definitions, and their build fields as Validate takes them;
`wheelfoundry local watch --dry-run` against the recorded indexes; the maintainer's notification."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from wheelfoundry_cli.main import main

from tests.watch_support import RECORDED, SCATTER
from wheelfoundry.aws.notify import notify, summary
from wheelfoundry.aws.report import report
from wheelfoundry.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.errors import JobsFailed, SubscriptionInvalid
from wheelfoundry.subscriptions import parse_subscription, sample_issues


def issues(raw: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(SubscriptionInvalid) as caught:
        parse_subscription(raw)
    assert "problem" in str(caught.value) and "in the subscription" in str(caught.value)
    return {i.path: i.message for i in caught.value.issues}


def test_fields_are_checked_by_the_request_schemas_definitions() -> None:
    found = issues({**SCATTER, "python": ["3.1O"], "build_env": {"lower": "x"}, "channel": "Bad Channel"})
    assert set(found) == {"python[0]", "build_env", "channel"}
    assert "a CPython minor version like 3.12" in found["python[0]"]  # the request schema's own hint


def test_source_torch_and_cuda_name_what_is_allowed() -> None:
    found = issues({"package": "p", "source": {"git": "https://github.com/a/b"}, "torch": "2.11", "cuda": "every"})
    assert found["source"] == "give exactly one of pypi, git (with ref) or s3"
    assert "PEP 440 specifier set" in found["torch"] and "'every' is not allowed" in found["cuda"]
    assert "unknown field 'pythn'; did you mean 'python'?" in issues({**SCATTER, "pythn": ["3.11"]})["pythn"]


def test_build_fields_validate_would_refuse_are_refused_at_subscribe() -> None:
    sub = parse_subscription({**SCATTER, "build_env": {"MAX_JOBS": "2", "FORCE_CUDA_EXTENSION": "1"}})
    found = sample_issues(sub, load_catalog(), load_config())
    assert [i.path for i in found] == ["build_env.MAX_JOBS"]
    assert sample_issues(parse_subscription(SCATTER), load_catalog(), load_config()) == []


def test_defaults() -> None:
    sub = parse_subscription({"package": "Torch_Scatter", "source": {"pypi": "latest"}, "torch": ">=2.11"})
    assert (sub.name, sub.cuda, sub.python, sub.platforms, sub.channel) == (
        "torch-scatter", "all", None, ("x86_64",), "extensions"
    )  # fmt: skip
    assert sub.wants("cpu") and parse_subscription({**SCATTER, "cuda": "all-cuda"}).wants("cpu") is False


def test_local_watch_dry_run_prints_the_run_with_its_wall_time_and_cost(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["local", "watch", "--dry-run", "--recorded", str(RECORDED), "--package", "torch-scatter", "--pypi", "2.1.2"]
    argv += ["--torch", ">=2.11", "--cuda", "all-cuda", "--python", "3.10,3.11,3.12,3.13"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "would start: w-torch-scatter-2-1-2-" in out
    assert "planned wall time" in out and " USD" in out
    no_toolkit = "CUDA 13.2: no toolkit for x86_64 in this deployment (no catalog row, no lock of the stack's)"
    assert f"{no_toolkit} (torch 2.12.0, 2.13.0, 2.14.1, 2.15.0)" in out  # a dry run without a stack locks none
    assert "torch 2.15 is not in the catalog: facts from its wheels, CUDA 12.6 13.0 13.2" in out
    assert main([*argv, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    (run,) = record["runs"]
    # 2.11: 12.6, 12.8, 13.0 x 4 Pythons; 2.12-2.14: 12.6, 13.0 x 4 (13.2 unlocked); 2.15: 12.6, 13.0 x 3.11-3.13
    assert run["cells"] == 12 + 3 * 8 + 6 and run["request"]["cuda"] == ["12.6", "12.8", "13.0"]


def test_local_watch_refuses_a_bad_subscription_by_field(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({**SCATTER, "torch": "latest"}))
    assert main(["local", "watch", "--dry-run", "--recorded", str(RECORDED), "--subscription", str(path)]) == 2
    assert "torch: 'latest' is not a valid value" in capsys.readouterr().err


RECORD = {"subscription": "torch-scatter", "reason": "torch 2.15.0 released", "cells": [{"torch": "2.15.0"}] * 3}


def test_the_summary_says_built_published_and_failed_with_cause() -> None:
    body = {
        "run_id": "w-torch-scatter-x",
        "channel": "extensions",
        "status": "failed",
        "missing_cells": ["torch2.15.0-cp313-cu130"],
        "merge": {"wheels": [{"cells": ["a", "b"]}]},
        "provenance": {"signed": ["torch_scatter-2.1.2+pt215cpu-cp311-cp311-manylinux_2_28_x86_64.whl"]},
        "failed": [{"job_id": "torch-scatter-cuda13.0-x86_64", "error": "BuildFailed", "cause": "nvcc: out of memory"}],
    }
    subject, message = summary(RECORD, body)
    assert subject == "WheelFoundry torch-scatter: 2/3 cells built, FAILED"
    assert "built: 2 of 3 cell(s); not built: torch2.15.0-cp313-cu130" in message
    assert "published to channel extensions: 1 wheel(s)\n  torch_scatter-2.1.2+pt215cpu" in message
    assert "torch-scatter-cuda13.0-x86_64: BuildFailed: nvcc: out of memory" in message


class FakeS3:
    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects, self.puts = objects, []

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        if Key not in self.objects:
            raise ClientError({"Error": {"Code": "NoSuchKey"}}, "GetObject")
        return {"Body": __import__("io").BytesIO(self.objects[Key])}

    def put_object(self, **kwargs: Any) -> None:
        self.puts.append(kwargs["Key"])


class FakeSns:
    def __init__(self) -> None:
        self.published: list[dict[str, Any]] = []

    def publish(self, **kwargs: Any) -> None:
        self.published.append(kwargs)


def test_report_notifies_a_watcher_started_run_before_it_fails_the_execution() -> None:
    s3, sns = FakeS3({"watch/runs/w-ts-1.json": json.dumps(RECORD).encode()}), FakeSns()
    run = {"id": "w-ts-1", "bucket": "b", "channel": "extensions"}
    event = {"run": run, "results": [{"job_id": "j", "status": "failed", "error": "BuildFailed", "cause": "oom"}]}
    with pytest.raises(JobsFailed):
        report(event, s3, lambda body: notify(s3, lambda: sns, "arn:aws:sns:us-east-1:1:t", run, body))
    (message,) = sns.published
    assert message["MessageAttributes"]["subscription"]["StringValue"] == "torch-scatter"
    assert "j: BuildFailed: oom" in message["Message"]


def test_runs_the_watcher_did_not_start_are_not_announced() -> None:
    s3, sns = FakeS3({}), FakeSns()
    for run_id in ("w-not-recorded", "20261127-manual"):
        assert not notify(s3, lambda: sns, "arn:t", {"id": run_id, "bucket": "b"}, {"status": "succeeded"})
    assert not notify(FakeS3({"watch/runs/w-a.json": b"{}"}), lambda: sns, "", {"id": "w-a", "bucket": "b"}, {})
    assert sns.published == []
