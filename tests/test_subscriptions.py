"""Subscriptions: checked by the request schema's own definitions, and their build fields as Validate takes them;
`wheelfoundry local watch --dry-run` against the recorded indexes; the maintainer's notification."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from wheelfoundry_cli.main import main
from wheelfoundry_cli.watch_local import render_tick

from tests.watch_support import RECORDED, SCATTER, state
from wheelfoundry.aws.notify import notify, summary
from wheelfoundry.aws.report import report
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.errors import JobsFailed, SubscriptionInvalid
from wheelfoundry.watch.subscriptions import parse_subscription, sample_issues
from wheelfoundry_user.subscriptions import release_lines

NVIDIA = RECORDED.parent / "toolkit_lock"  # PyPI's cuda-toolkit and nvidia-* pages, recorded for CUDA 13.2


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


def test_abi_stable_over_a_range_older_than_the_stable_abi_is_refused_at_subscribe() -> None:
    """Every new version of the package is requested for each release in range: one before 2.10 would be refused
    by Validate on every such run, so the subscription is refused first, naming the field and the fix."""
    (issue,) = sample_issues(
        parse_subscription({**SCATTER, "torch": ">=2.8", "abi": "stable"}), load_catalog(), load_config()
    )
    assert (issue.path, issue.value, issue.allowed) == ("abi", "stable", ("auto", "per-torch"))
    assert "also admits 2.8, 2.9" in issue.message and issue.message.endswith("narrow torch to >=2.10")
    fine = parse_subscription({**SCATTER, "torch": ">=2.10", "abi": "stable"})
    assert sample_issues(fine, load_catalog(), load_config()) == []


def test_defaults() -> None:
    sub = parse_subscription({"package": "Torch_Scatter", "source": {"pypi": "latest"}, "torch": ">=2.11"})
    assert (sub.name, sub.cuda, sub.python, sub.platforms, sub.channel) == (
        "torch-scatter", "all", None, ("x86_64",), "extensions"
    )  # fmt: skip
    assert sub.wants("cpu") and parse_subscription({**SCATTER, "cuda": "all-cuda"}).wants("cpu") is False


def test_local_watch_dry_run_prints_the_run_with_its_wall_time_and_cost(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["local", "watch", "--dry-run", "--recorded", str(RECORDED), "--recorded", str(NVIDIA)]
    argv += ["--package", "torch-scatter", "--pypi", "2.1.2", "--torch", ">=2.11", "--cuda", "all-cuda"]
    argv += ["--python", "3.10,3.11,3.12,3.13"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "would start: w-torch-scatter-2-1-2-" in out
    assert "planned wall time" in out and " USD" in out
    assert "torch 2.15 is not in the catalog: facts from its wheels, CUDA 12.6 13.0 13.2" in out
    assert "problem:" not in out  # no "no lock ... run tools/lock_cuda.py": the dry run resolves the lock
    assert main([*argv, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    (run,) = record["runs"]
    # 2.11: 12.6, 12.8, 13.0 x 4 Pythons; 2.12-2.14: 12.6, 13.0, 13.2 x 4; 2.15: 12.6, 13.0, 13.2 x 3.11-3.13
    assert run["cells"] == 12 + 3 * 12 + 9 and run["request"]["cuda"] == ["12.6", "12.8", "13.0", "13.2"]


def test_local_watch_dry_run_resolves_and_names_the_lock_the_watcher_would_write(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """torch 2.15's PyPI build is CUDA 13.2, which this checkout has no lock for (issue 64 item 5): the dry run
    resolves the lock from PyPI's pages (recorded), prints it, writes nothing and plans the 13.2 cells with it."""
    sub = ["--package", "torch-scatter", "--pypi", "2.1.2", "--torch", ">=2.15", "--cuda", "all"]
    argv = ["local", "watch", "--dry-run", "--recorded", str(RECORDED), "--recorded", str(NVIDIA), "--json"]
    assert main([*argv, *sub]) == 0
    record = json.loads(capsys.readouterr().out)
    (lock,) = record["toolkits"]
    assert (lock["cuda"], lock["platform"], lock["release"], lock["status"]) == (
        "13.2",
        "x86_64",
        "13.2.2",
        "would write",
    )
    assert lock["key"] == f"toolkits/cuda-13.2-x86_64-{lock['sha256'][:16]}.toml" and lock["wheels"] > 10
    (run,) = record["runs"]
    assert "13.2" in run["request"]["cuda"] and run["cells"] == 4 * 5  # cpu, 12.6, 13.0, 13.2 x 3.11-3.15
    assert record["subscriptions"]["torch-scatter"]["problems"] == []
    assert f"toolkit lock would write: CUDA 13.2 x86_64 (release 13.2.2, {lock['wheels']} wheel(s))" in render_tick(
        record
    )
    # where PyPI's NVIDIA pages cannot be read, the 13.2 cells are named, with why and the fix
    assert main(["local", "watch", "--dry-run", "--recorded", str(RECORDED), *sub]) == 0
    out = capsys.readouterr().out
    assert "CUDA 13.2: no lock for x86_64" in out and "the watcher could not write one" in out


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
        self.objects, self.puts = objects, list[str]()

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        if Key not in self.objects:
            raise ClientError({"Error": {"Code": "NoSuchKey"}}, "GetObject")
        return {"Body": __import__("io").BytesIO(self.objects[Key])}

    def put_object(self, **kwargs: Any) -> None:
        self.puts.append(kwargs["Key"])
        body = kwargs["Body"]
        self.objects[kwargs["Key"]] = body.encode() if isinstance(body, str) else body


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


def test_subscriptions_list_shows_served_and_missing_cells_per_release_and_why(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """What `subscriptions list` prints from a tick's record: per release, cells served, missing and the run
    for them, and each variant not built with why (here PyPI's NVIDIA pages are not in the recording)."""
    served = [("2.14.1", v, p, "x86_64") for v in ("cpu", "12.6", "13.0") for p in ("3.12", "3.13")]
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state("torch-scatter", "2.1.2", served)))
    argv = ["local", "watch", "--dry-run", "--recorded", str(RECORDED), "--json", "--index-state", str(path)]
    argv += ["--package", "torch-scatter", "--pypi", "2.1.2", "--torch", ">=2.14", "--python", "3.12,3.13"]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    (run,) = record["runs"]
    lines = release_lines(record)
    assert lines[0] == "cells per torch release (last tick):"
    assert "  torch-scatter torch 2.14.1: served 6, missing 0" in lines
    assert f"  torch-scatter torch 2.15.0: served 0, missing 6 (run {run['name']}: would start)" in lines
    not_built = [line for line in lines if line.startswith("    not built: CUDA 13.2: no lock for x86_64")]
    assert len(not_built) == 2  # 2.14.1 and 2.15.0 each name it
    assert release_lines({"subscriptions": {"a": {"missing": 1}}}) == [
        "cells per torch release (last tick):",
        "  a: per-release cells not in this tick's record (a watcher older than this one)",
    ]


def test_report_and_notification_give_the_release_days_minutes_lock_and_cells() -> None:
    from datetime import datetime

    cells = [{"torch": "2.15.0", "cuda": c, "python": "3.12", "platform": "x86_64"} for c in ("cpu", "13.2")]
    lock = {"cuda": "13.2", "platform": "x86_64", "release": "13.2.2", "key": "toolkits/k.toml", "sha256": "ab" * 32}
    record = {**RECORD, "cells": cells, "toolkits": [lock], "started_at": "2026-10-28T16:05:00+00:00"}
    s3, sns = FakeS3({"watch/runs/w-ts-2.json": json.dumps(record).encode()}), FakeSns()
    run = {"id": "w-ts-2", "bucket": "b", "channel": "extensions"}
    merge = {
        "wheels": [{"cells": ["torch2.15.0-cp312-cuda13.2-x86_64"]}],
        "missing_cells": ["torch2.15.0-cp312-cpu-x86_64"],
    }
    event = {"run": run, "results": [], "merge": merge}
    now = datetime.fromisoformat("2026-10-28T17:35:30+00:00")
    with pytest.raises(JobsFailed):  # nothing in results: merge names the missing cell; the run is failed
        report({**event, "merge": {**merge, "status": "failed"}}, s3, None, now=now)
    report(event, s3, lambda body: notify(s3, lambda: sns, "arn:t", run, body), now=now)
    day = json.loads(s3.objects["runs/w-ts-2/report.json"])["release_day"]
    assert day["minutes"] == 90.5 and day["tick_at"] == record["started_at"] and day["toolkits"] == [lock]
    assert day["cells"] == {
        "torch2.15.0-cp312-cpu-x86_64": "not built",
        "torch2.15.0-cp312-cuda13.2-x86_64": "published",
    }
    (message,) = sns.published
    text = message["Message"]
    assert "tick 2026-10-28T16:05:00+00:00 to report 2026-10-28T17:35:30+00:00: 90.5 min" in text
    assert "toolkit locked by the watcher for it: CUDA 13.2 x86_64 (release 13.2.2)" in text
    assert "  torch2.15.0-cp312-cuda13.2-x86_64: published" in text
    report({**event, "run": {**run, "id": "20261128-manual"}}, s3, None, now=now)  # not the watcher's: no section
    assert "release_day" not in json.loads(s3.objects["runs/20261128-manual/report.json"])
