"""Issue 64 item 1: the watcher locks a CUDA toolkit a release needs and nothing locks (moto's S3 and Step
Functions, the recorded indexes of tests/fixtures/watch and tests/fixtures/toolkit_lock): the lock under
toolkits/, toolkits/index.json, the cells planned in the same tick; ToolkitApproval=manual; Validate."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import tomllib
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from wheelfoundry_cli.watch_local import recorded

from tests import test_watch_stack
from tests.test_watch_stack import BUCKET, NOW, executions, recording, sdist, settings
from tests.watch_support import RECORDED, stack_toolkit
from wheelfoundry.aws.runs import ValidateSettings, validate
from wheelfoundry.aws.watch import run_tick
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.errors import RequestInvalid
from wheelfoundry.planning.buildenv import toolkit_requirements
from wheelfoundry.toolkits import stack_toolkits
from wheelfoundry.toolkits.toolkit_lock import ToolkitLockError
from wheelfoundry_user.toolkits import approve

SUB_132 = {"package": "wf-tiny-ext", "source": {"pypi": "latest"}, "torch": ">=2.15", "cuda": ["13.2"],
           "python": ["3.12"], "channel": "ci"}  # fmt: skip
REQUEST = {"framework": "extension", "name": "wf-tiny-ext", "torch": ["2.15.0"], "cuda": ["13.2"], "python": ["3.12"],
           "source": {"s3": f"s3://{BUCKET}/sources/wf_tiny_ext-0.1.0.tar.gz"}}  # fmt: skip
LOCK_RECORDING = RECORDED.parent / "toolkit_lock"
aws = test_watch_stack.aws  # the moto stack: bucket with bundle pins (no 13.2 lock), state machine


def upstream_with_nvidia(tmp_path: Path) -> Any:
    """torch's pages and wf-tiny-ext's, plus PyPI's answers for cuda-toolkit and the nvidia-* projects."""
    root = recording(tmp_path, sdist())
    for part in ("pypi.org", "files.pythonhosted.org"):
        shutil.copytree(LOCK_RECORDING / part, root / part, dirs_exist_ok=True)
    return recorded(root)


def follow_13_2(s3: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key="subscriptions/wf-tiny-ext.json", Body=json.dumps(SUB_132))


def read(s3: Any, key: str) -> bytes:
    body: bytes = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    return body


def test_a_tick_locks_the_toolkit_a_new_release_needs_and_plans_its_cells(aws: Any, tmp_path: Path) -> None:
    s3, sfn, machine = aws
    follow_13_2(s3)
    fetch = upstream_with_nvidia(tmp_path)
    record = run_tick(s3, sfn, fetch, settings(machine), NOW)
    (locked,) = record["toolkits"]
    assert (locked["cuda"], locked["platform"], locked["release"], locked["status"]) == (
        "13.2",
        "x86_64",
        "13.2.2",
        "written",
    )
    body = read(s3, locked["key"])
    assert hashlib.sha256(body).hexdigest() == locked["sha256"]
    assert locked["key"] == f"toolkits/cuda-13.2-x86_64-{locked['sha256'][:16]}.toml"
    assert b'"nvidia-cudnn-cu13==9.26.0.51"' in body  # torch 2.15.0's own pin, from its METADATA
    index = json.loads(read(s3, stack_toolkits.INDEX_KEY))["toolkits"]["13.2-x86_64"]
    assert index["key"] == locked["key"] and index["sha256"] == locked["sha256"] and index["approved"] is True
    assert index["row"]["toolkit"] == "13.2.2" and index["sources"]["archs"].startswith("upstream not read")
    # the recorded upstream holds no torch wheel bytes: the record says the row was assumed, and from where
    assert "; assumed from CUDA 13.0's row" in index["sources"]["archs"]
    # the same tick plans and starts the 13.2 cell; the run record names the lock for the notification
    (run,) = record["runs"]
    assert run["status"] == "started" and run["request"]["cuda"] == ["13.2"] and run["cells"] == 1
    runs = json.loads(read(s3, f"watch/runs/{run['name']}.json"))
    assert [(t["cuda"], t["sha256"]) for t in runs["toolkits"]] == [("13.2", locked["sha256"])]
    # the next tick writes no second lock
    again = run_tick(s3, sfn, fetch, settings(machine), NOW)
    assert again["toolkits"] == [] and len(s3.list_objects_v2(Bucket=BUCKET, Prefix="toolkits/cuda-")["Contents"]) == 1


def test_without_the_lock_step_nothing_is_planned_for_13_2(aws: Any, tmp_path: Path, monkeypatch: Any) -> None:
    s3, sfn, machine = aws
    follow_13_2(s3)
    from wheelfoundry.aws import toolkits

    monkeypatch.setattr(toolkits, "lock_one", lambda *a: (_ for _ in ()).throw(ToolkitLockError("x")))
    record = run_tick(s3, sfn, upstream_with_nvidia(tmp_path), settings(machine), NOW)
    assert record["runs"] == [] and record["toolkits"] == []
    (problem,) = [p for p in record["subscriptions"]["wf-tiny-ext"]["problems"] if p.startswith("CUDA 13.2")]
    assert "the watcher could not write one (x)" in problem and "tools/lock_cuda.py wheels 13.2" in problem


def test_manual_approval_holds_the_cells_until_approved(aws: Any, tmp_path: Path) -> None:
    s3, sfn, machine = aws
    follow_13_2(s3)
    fetch = upstream_with_nvidia(tmp_path)
    record = run_tick(s3, sfn, fetch, settings(machine, toolkit_approval="manual"), NOW)
    (locked,) = record["toolkits"]
    assert locked["approved"] is False and record["runs"] == [] and executions(sfn, machine) == []
    problems = record["subscriptions"]["wf-tiny-ext"]["problems"]
    assert any("awaiting approval: wheelfoundry toolkits approve 13.2 --platform x86_64" in p for p in problems)
    again = run_tick(s3, sfn, fetch, settings(machine, toolkit_approval="manual"), NOW)
    assert again["runs"] == [] and again["toolkits"] == []  # still waiting; no second lock
    (flipped,) = approve(s3, BUCKET, "13.2", ["x86_64"])
    assert flipped.approved and flipped.sha256 == locked["sha256"]
    approved = run_tick(s3, sfn, fetch, settings(machine, toolkit_approval="manual"), NOW)
    (run,) = approved["runs"]
    assert run["status"] == "started" and run["request"]["cuda"] == ["13.2"]


def test_validate_takes_13_2_only_once_the_stack_has_its_lock(aws: Any, tmp_path: Path) -> None:
    s3, sfn, machine = aws
    follow_13_2(s3)
    event = {"request": REQUEST, "name": "r1", "execution": "arn:aws:states:us-east-1:1:execution:wf-build:r1"}
    checks = ValidateSettings(BUCKET, "us-east-1", "", 24, 250.0, 900, 10, container_builds=False)
    s3.put_object(Bucket=BUCKET, Key="watch/derived.json", Body=b'{"format": 1, "releases": []}')
    with pytest.raises(RequestInvalid, match=r"torch 2\.15 is not in the compatibility catalog"):
        validate(event, s3, checks, date(2026, 11, 27))
    # torch 2.14.1 is in the catalog, its 13.2 variant too: refused by the field and value until a lock exists
    older = {**event, "request": {**REQUEST, "torch": ["2.14.1"]}}
    with pytest.raises(RequestInvalid) as refused:
        validate(older, s3, checks, date(2026, 11, 27))
    (issue,) = refused.value.issues
    assert issue.path == "cuda[0]" and issue.value == "13.2" and "no toolkit in this deployment" in issue.message
    record = run_tick(s3, sfn, upstream_with_nvidia(tmp_path), settings(machine), NOW)  # writes the lock
    (locked,) = record["toolkits"]
    out = validate(event, s3, checks, date(2026, 11, 27))
    (job,) = out["jobs"]
    contract = json.loads(read(s3, f"runs/r1/jobs/{job['id']}/job.json"))
    assert contract["toolkit_lock"] == {"key": locked["key"], "sha256": locked["sha256"]}
    assert contract["image"]["build_args"]["CUDA_VERSION"] == "13.2"
    # container builds too: the runner makes the builder image with the stack's lock (wfbuild.cuda.stack_lock)
    container = ValidateSettings(BUCKET, "us-east-1", "", 24, 250.0, 900, 10, container_builds=True)
    pointer = json.loads(read(s3, "bundles/current.json"))
    pointer["pins"]["bases"] = ["quay.io/pypa/manylinux_2_28_x86_64"]  # the base digest a bundle pins
    s3.put_object(Bucket=BUCKET, Key="bundles/current.json", Body=json.dumps(pointer))
    (job,) = validate({**event, "name": "r2"}, s3, container, date(2026, 11, 27))["jobs"]
    contract = json.loads(read(s3, f"runs/r2/jobs/{job['id']}/job.json"))
    assert contract["toolkit_lock"] == {"key": locked["key"], "sha256": locked["sha256"]}
    # a request that also names aarch64 (no 13.2 build of torch 2.15 there) is refused, naming it, before any launch
    both = {**event, "name": "r3", "request": {**REQUEST, "platforms": ["x86_64", "aarch64"]}}
    with pytest.raises(RequestInvalid) as refused:
        validate(both, s3, checks, date(2026, 11, 27))
    assert any("13.2" in str(i) and "aarch64" in str(i) for i in refused.value.issues), refused.value.issues
    assert not s3.list_objects_v2(Bucket=BUCKET, Prefix="runs/r3/").get("Contents")


def test_an_approval_keeps_what_a_tick_recorded_meanwhile(aws: Any, tmp_path: Path, monkeypatch: Any) -> None:
    """The record is written over the one read (If-Match): a lock recorded between the approval's read and its
    write stays, and the approval is applied to the record as it is then."""
    from wheelfoundry.aws import toolkits

    s3, sfn, machine = aws
    follow_13_2(s3)
    run_tick(s3, sfn, upstream_with_nvidia(tmp_path), settings(machine, toolkit_approval="manual"), NOW)
    entries, _ = stack_toolkits.parse(read(s3, stack_toolkits.INDEX_KEY))
    mine = entries["13.2-x86_64"]
    other = dataclasses.replace(  # a lock another tick records meanwhile
        mine, key=mine.key.replace("x86_64", "aarch64"), row=dataclasses.replace(mine.row, platforms=("aarch64",))
    )
    reads = []
    real = toolkits.read_tagged

    def racing(s3_: Any, bucket: str) -> Any:
        found = real(s3_, bucket)
        if not reads:  # right after the approval's first read, before its write
            body = stack_toolkits.body({**entries, "13.2-aarch64": other})
            s3.put_object(Bucket=BUCKET, Key=stack_toolkits.INDEX_KEY, Body=body)
        reads.append(found[2])
        return found

    monkeypatch.setattr(toolkits, "read_tagged", racing)
    (flipped,) = approve(s3, BUCKET, "13.2", ["x86_64"])
    assert len(reads) == 2 and reads[0] != reads[1]  # the first write was refused, the record read again
    after, _ = stack_toolkits.parse(read(s3, stack_toolkits.INDEX_KEY))
    assert after["13.2-x86_64"].approved and flipped.platform == "x86_64"
    assert "13.2-aarch64" in after and not after["13.2-aarch64"].approved  # the other writer's lock stays


def test_a_tick_whose_record_write_keeps_conflicting_plans_nothing_with_the_lock(
    aws: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    from wheelfoundry.aws import toolkits

    s3, sfn, machine = aws
    follow_13_2(s3)
    attempts: list[Any] = []

    def refused(*args: Any) -> bool:
        attempts.append(args)
        return False

    monkeypatch.setattr(toolkits, "write_record", refused)
    fetch = upstream_with_nvidia(tmp_path)
    record = run_tick(s3, sfn, fetch, settings(machine), NOW)
    assert len(attempts) == toolkits.ATTEMPTS and record["runs"] == [] and record["toolkits"] == []
    assert any(
        "toolkits/index.json changed under this tick 3 times, or could not be read again" in p
        for p in record["problems"]
    )
    problems = record["subscriptions"]["wf-tiny-ext"]["problems"]
    assert any(p.startswith("CUDA 13.2: locked as toolkits/cuda-13.2-x86_64-") and "next tick" in p for p in problems)
    # the lock itself is kept (content-addressed); the next tick records it and plans the cell
    monkeypatch.undo()
    again = run_tick(s3, sfn, fetch, settings(machine), NOW)
    (run,) = again["runs"]
    assert run["status"] == "started" and run["request"]["cuda"] == ["13.2"]


def test_a_writer_that_read_before_an_approval_never_undoes_it(aws: Any, tmp_path: Path) -> None:
    """A tick that read the record before an approval adds only what the record lacks when it writes: the entry
    it resolved again (unapproved) does not replace the approved one. A record deleted since it was read is a
    conflict (S3 answers If-Match on a missing key with NoSuchKey), read again, not a crash."""
    from wheelfoundry.aws import toolkits

    s3, sfn, machine = aws
    follow_13_2(s3)
    run_tick(s3, sfn, upstream_with_nvidia(tmp_path), settings(machine, toolkit_approval="manual"), NOW)
    stale, _ = stack_toolkits.parse(read(s3, stack_toolkits.INDEX_KEY))  # what a slow tick read: unapproved
    approve(s3, BUCKET, "13.2", ["x86_64"])
    latest, written = toolkits.update_record(s3, BUCKET, lambda current: stack_toolkits.added(current, stale.values()))
    assert written and latest["13.2-x86_64"].approved
    assert stack_toolkits.parse(read(s3, stack_toolkits.INDEX_KEY))[0]["13.2-x86_64"].approved
    _, _, etag = toolkits.read_tagged(s3, BUCKET)
    s3.delete_object(Bucket=BUCKET, Key=stack_toolkits.INDEX_KEY)
    assert toolkits.write_record(s3, BUCKET, stale, etag) is False
    assert toolkits.write_record(s3, BUCKET, stale, None) is True  # the first write of a record: If-None-Match


def test_validate_names_the_watchers_lock_of_a_catalog_cuda_the_bundle_lacks(aws: Any) -> None:
    # CUDA 13.0 has a catalog row; a bundle without its x86_64 lock (older, or trimmed) and the watcher's lock of it
    s3, _, _ = aws
    bundled = read(s3, "bundles/current.json")
    pointer = json.loads(bundled)
    del pointer["pins"]["cuda"]["13.0-x86_64"]
    s3.put_object(Bucket=BUCKET, Key="bundles/current.json", Body=json.dumps(pointer))
    entry = stack_toolkit("13.0")
    s3.put_object(Bucket=BUCKET, Key=stack_toolkits.INDEX_KEY, Body=stack_toolkits.body({entry.name: entry}))
    request = {**REQUEST, "torch": ["2.14.1"], "cuda": ["13.0"]}
    checks = ValidateSettings(BUCKET, "us-east-1", "", 24, 250.0, 900, 10, container_builds=False)
    out = validate({"request": request, "name": "r1", "execution": "arn:x:r1"}, s3, checks, date(2026, 11, 27))
    (job,) = out["jobs"]
    contract = json.loads(read(s3, f"runs/r1/jobs/{job['id']}/job.json"))
    assert contract["toolkit_lock"] == {"key": entry.key, "sha256": entry.sha256}
    s3.put_object(Bucket=BUCKET, Key="bundles/current.json", Body=bundled)
    out = validate(
        {"request": request, "name": "r2", "execution": "arn:x:r2"}, s3, checks, date(2026, 11, 27)
    )  # the bundle's lock wins
    assert "toolkit_lock" not in json.loads(read(s3, f"runs/r2/jobs/{out['jobs'][0]['id']}/job.json"))


def test_a_lock_for_a_catalog_release_holds_the_pins_its_cells_install(aws: Any, tmp_path: Path) -> None:
    # No METADATA recorded for torch 2.14.1: its catalog row's pins are what its cu130 cells ask the lock for
    s3, sfn, machine = aws
    pointer = json.loads(read(s3, "bundles/current.json"))
    del pointer["pins"]["cuda"]["13.0-x86_64"]
    s3.put_object(Bucket=BUCKET, Key="bundles/current.json", Body=json.dumps(pointer))
    root = recording(tmp_path, sdist())
    shutil.copytree(RECORDED.parent / "release_day", root, dirs_exist_ok=True)
    sub = {**SUB_132, "torch": ">=2.14,<2.15", "cuda": ["13.0"]}
    s3.put_object(Bucket=BUCKET, Key="subscriptions/wf-tiny-ext.json", Body=json.dumps(sub))
    record = run_tick(s3, sfn, recorded(root), settings(machine), NOW)
    (locked,) = record["toolkits"]
    (run,) = record["runs"]
    assert run["status"] == "started" and run["request"]["cuda"] == ["13.0"]
    lock = tomllib.loads(read(s3, locked["key"]).decode())
    catalog = load_catalog()
    pins = toolkit_requirements(catalog.toolkit_for(catalog.release("2.14"), "13.0").requirements)  # the cells' lines
    assert pins and set(pins) <= set(lock["requirements"]), lock["requirements"]
    files = {f"{w['name']}=={w['version']}" for w in lock["wheel"]}
    assert "nvidia-cublas==13.1.0.3" in files and "nvidia-cuda-nvrtc==13.0.88" in files
