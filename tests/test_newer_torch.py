"""Issue 64 item 3: an extension request naming a torch release newer than the catalog (2.15: no catalog row,
and its PyPI build's CUDA 13.2 has no lock here) is planned by `wheelfoundry plan` from the stack's records or
from upstream (recorded: tests/fixtures/watch and tests/fixtures/toolkit_lock), refused with what was tried
and the fix when neither is read; `local run` writes the watcher's facts into its embedded stack first."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from wheelfoundry_cli.main import main
from wheelfoundry_cli.newer_torch import catalog_for
from wheelfoundry_cli.watch_local import recorded

from tests import test_watch_stack
from tests.test_subscriptions import FakeS3
from tests.test_watch_stack import BUCKET
from tests.watch_support import RECORDED
from wheelfoundry.aws import watch
from wheelfoundry.aws.runs import ValidateSettings, validate
from wheelfoundry.aws.watch import FetchFailed, Sources
from wheelfoundry.catalog import derived
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.errors import RequestInvalid
from wheelfoundry.toolkits import stack_toolkits
from wheelfoundry_local.newer_torch import seed

NVIDIA = RECORDED.parent / "toolkit_lock"
REQUEST = {"framework": "extension", "name": "wf-tiny-ext", "torch": ["2.15"], "cuda": ["cpu", "13.2"],
           "python": ["3.12"], "source": {"s3": f"s3://{BUCKET}/sources/wf_tiny_ext-0.1.0.tar.gz"}}  # fmt: skip
aws = test_watch_stack.aws


def unreachable(url: str, headers: Any) -> bytes:
    raise FetchFailed(f"{url}: <urlopen error [Errno -2] Name or service not known>")


def plan(tmp_path: Path, *flags: str) -> int:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(REQUEST))
    return main(["plan", str(path), *flags])


def test_plan_takes_its_facts_and_the_13_2_toolkit_from_upstream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "2.15" not in {r.torch for r in load_catalog().releases} and "13.2" not in load_catalog().cuda
    monkeypatch.setattr(watch, "urllib_fetch", recorded(RECORDED, NVIDIA))
    assert plan(tmp_path) == 0
    out = capsys.readouterr().out
    assert (
        "note: torch 2.15 is newer than the catalog: facts from upstream (" in out and "pypi.org/simple/torch/" in out
    )
    assert "CUDA 13.2 x86_64 as the watcher would lock it (toolkits/cuda-13.2-x86_64-" in out
    assert "would refuse" not in out  # the lock the watcher would write counts, as Validate would count it
    assert plan(tmp_path, "--json") == 0
    jobs = {j["id"]: j for j in json.loads(capsys.readouterr().out)["jobs"]}
    assert {j["image"]["build_args"].get("CUDA_VERSION") for j in jobs.values()} == {None, "13.2"}


def test_plan_names_the_torch_what_was_tried_and_the_fix_when_nothing_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(watch, "urllib_fetch", unreachable)
    assert plan(tmp_path) == 2
    err = capsys.readouterr().err
    assert "torch: torch 2.15 is not in the compatibility catalog and its facts could not be read" in err
    assert "tried: upstream https://pypi.org/: https://pypi.org/simple/torch/: <urlopen error" in err
    assert "name a stack whose watcher follows it (--stack NAME)" in err and "2.13, 2.14)" in err


class Farm:
    def __init__(self, objects: dict[str, bytes]) -> None:
        self.stack, self.bucket, self.s3 = "wf", BUCKET, FakeS3(objects)

    def client(self, service: str) -> Any:
        return self.s3


def test_plan_with_a_stack_reads_its_watcher_record_not_upstream() -> None:
    facts = catalog_for(REQUEST, load_catalog(), load_config(), None, recorded(RECORDED, NVIDIA), Sources())
    assert facts is not None and facts.derived and facts.locks
    objects = {
        derived.DERIVED_KEY: derived.body(facts.derived),
        stack_toolkits.INDEX_KEY: stack_toolkits.body(facts.record),
    }
    found = catalog_for(REQUEST, load_catalog(), load_config(), Farm(objects), unreachable, Sources())
    assert found is not None and found.catalog.release("2.15") is not None and "13.2" in found.catalog.cuda
    assert found.where == "stack wf's watch/derived.json (1 release(s)) and toolkits/index.json (1 lock(s))"
    with pytest.raises(RequestInvalid) as refused:  # a stack whose watcher has not seen 2.15: said, no guess
        catalog_for(REQUEST, load_catalog(), load_config(), Farm({}), unreachable, Sources())
    (issue,) = refused.value.issues
    assert "tried: stack wf's watch/derived.json (0 release(s)) and toolkits/index.json (0 lock(s)): " in issue.message
    assert "no facts of torch 2.15" in issue.message and "plan without --stack (from PyPI)" in issue.message


def test_local_run_writes_the_watchers_facts_so_validate_takes_the_request(aws: Any) -> None:
    s3, _, _ = aws
    event = {"request": REQUEST, "name": "r1", "execution": "arn:aws:states:us-east-1:1:execution:wf-build:r1"}
    checks = ValidateSettings(BUCKET, "us-east-1", "", 24, 250.0, 900, 10, container_builds=False)
    with pytest.raises(RequestInvalid, match=r"torch 2\.15 is not in the compatibility catalog"):
        validate(event, s3, checks, date(2026, 11, 27))  # a fresh embedded stack: its watcher never ticked
    said: list[str] = []
    assert seed(s3, BUCKET, REQUEST, said.append, recorded(RECORDED, NVIDIA))
    assert said[0].startswith("toolkit lock for the embedded stack: CUDA 13.2 x86_64 toolkits/cuda-13.2-x86_64-")
    out = validate(event, s3, checks, date(2026, 11, 27))
    cuda = [j for j in out["jobs"] if "cuda13.2" in j["id"]]
    assert len(cuda) == 1
    contract = json.loads(s3.get_object(Bucket=BUCKET, Key=f"runs/r1/jobs/{cuda[0]['id']}/job.json")["Body"].read())
    assert contract["toolkit_lock"]["key"].startswith("toolkits/cuda-13.2-x86_64-")
    assert not seed(s3, BUCKET, {**REQUEST, "torch": ["2.14.1"]}, said.append, unreachable)  # the catalog's: no reads
