"""A request's ``abi: stable`` (issue 66): refused at Validate for a torch range older than the stable ABI, and
carried into each cell's contract, where the abi stage becomes the gate the cell's repair, smoke and publish
wait on (the refusal itself, naming the file and the symbol or shim: tests/test_abi_reading.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from wfbuild.stages.stages import render_stages
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.errors import RequestInvalid
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request

ROOT = Path(__file__).resolve().parents[1]
BASE = json.loads((ROOT / "examples" / "requests" / "extension-cuda-12.4.json").read_text())


def _stages(abi: str, cuda: str) -> tuple[dict[str, Any], dict[str, Any]]:
    raw = {**BASE, "torch": ["2.12", "2.10"], "cuda": [cuda], "python": ["3.12"], "abi": abi}
    if cuda == "cpu":
        del raw["arch_list"]
    plan = plan_request(parse_request(raw, load_catalog(), load_config()), load_catalog(), load_config())
    (job,) = plan.jobs
    contract = job.to_dict()
    return contract, {s.name: s for s in render_stages(contract)}


def test_stable_is_refused_for_a_torch_before_the_stable_abi() -> None:
    raw = {**BASE, "torch": ["2.9", "2.10"], "abi": "stable"}
    with pytest.raises(RequestInvalid) as refused:
        parse_request(raw, load_catalog(), load_config())
    (issue,) = [i for i in refused.value.issues if i.path == "abi"]  # (torch 2.9 has no CUDA 12.4 either)
    assert (issue.value, issue.allowed) == ("stable", ("auto", "per-torch"))
    assert "begins with torch 2.10; the request also names torch 2.9" in issue.message
    with pytest.raises(RequestInvalid, match="abi"):
        parse_request({**raw, "abi": "always"}, load_catalog(), load_config())  # the schema's enum


@pytest.mark.parametrize("cuda", ["cpu", "12.6"])
def test_stable_makes_the_abi_reading_the_gate_of_each_cell(cuda: str) -> None:
    contract, stages = _stages("stable", cuda)
    assert contract["extension"]["abi"] == "stable" and contract["extension"]["abi_oldest"] == "2.10"
    (built,) = contract["extension"]["cells"]  # one build, against the oldest torch: its wheel serves 2.10-2.12
    cell, label = built["id"], "abi210cpu" if cuda == "cpu" else "abi210cu12"  # its floor and CUDA major
    assert built["torch_version"].startswith("2.10.") and built["local_label"] == label  # not pt210<variant>
    served = [c["torch_version"].rsplit(".", 1)[0] for c in contract["extension"]["serves"]]
    assert sorted(served) == ["2.10", "2.12"]
    repair = stages[f"repair-{cell}"].argv
    assert repair[repair.index("--torch-floor") + 1] == "2.10" and "--pin-torch" not in repair  # torch>=2.10
    abi = stages[f"abi-{cell}"]
    assert abi.argv[abi.argv.index("--require-stable") + 1] == "2.10"  # the oldest torch, not the cell's own
    after = stages[f"devicecode-{cell}"] if cuda != "cpu" else stages[f"repair-{cell}"]
    assert after.needs == (abi.name,)
    if cuda != "cpu":
        assert stages[f"repair-{cell}"].needs == (f"devicecode-{cell}",)


def test_auto_keeps_the_reading_a_record_nothing_waits_on() -> None:
    contract, stages = _stages("auto", "cpu")
    assert contract["extension"]["abi"] == "auto" and contract["extension"]["abi_oldest"] is None
    cell = contract["extension"]["cells"][0]["id"]
    assert "--require-stable" not in stages[f"abi-{cell}"].argv
    assert stages[f"repair-{cell}"].needs == (f"build-{cell}",)


def test_stable_plans_one_build_per_variant_and_python_and_tests_every_torch() -> None:
    raw = {**BASE, "torch": ["2.10", "2.11", "2.12"], "cuda": ["cpu", "12.6"], "python": ["3.11", "3.12"]}
    plans = {abi: plan_request(parse_request({**raw, "abi": abi}, load_catalog(), load_config()), load_catalog(),
                               load_config()) for abi in ("stable", "per-torch")}  # fmt: skip
    built = {
        abi: [c for j in p.jobs for c in j.extension.cells]
        for abi, p in plans.items()
        if all(j.extension for j in p.jobs)
    }
    assert len(built["per-torch"]) == 12 and len(built["stable"]) == 4  # 3 torch x 2 variants x 2 Pythons; 2 x 2
    assert {c.torch_version.rsplit(".", 1)[0] for c in built["stable"]} == {"2.10"}
    for abi, plan in plans.items():  # the test jobs install the published wheels into every torch of the range
        tested = sorted(c.id for t in plan.tests for c in t.extension.cells)
        assert len(tested) == 12, (abi, tested)
    assert plans["stable"].hours < plans["per-torch"].hours


def _recorded(*readings: tuple[bool, str | None], source: str = BASE["source"]["s3"]) -> dict[str, Any]:
    """A source's record (wheelfoundry.planning.calibration) whose newest run read these (stable, floor) cells."""
    old = {"cell": "torch2.9.0-cp312-cpu-x86_64", "run": "r0", "compile_core_hours": 0.1, "serial_hours": 0.01}
    cells = [{**old, "abi": {"stable": False, "floor": None, "source": source}}]
    for n, (stable, floor) in enumerate(readings):
        reading = {"stable": stable, "floor": floor, "source": source}
        cells.append({**old, "cell": f"c{n}", "run": "r1", "cuda": False, "abi": reading})
    return {"scope": "s", "cells": cells}


def test_auto_plans_stable_once_the_newest_recorded_run_read_every_cell_stable() -> None:
    raw = {**BASE, "torch": ["2.10", "2.11", "2.12"], "cuda": ["cpu"], "python": ["3.12"], "abi": "auto"}
    del raw["arch_list"]
    request, catalog, config = parse_request(raw, load_catalog(), load_config()), load_catalog(), load_config()

    def builds(record: dict[str, Any] | None) -> tuple[int, list[str]]:
        plan = plan_request(request, catalog, config, record=record)
        return sum(len(j.extension.cells) for j in plan.jobs if j.extension), [n for n in plan.notes if "abi" in n]

    assert builds(None) == (3, [])  # nothing recorded: per torch
    count, (note,) = builds(_recorded((True, "2.10"), (True, "2.10")))
    assert count == 1 and "abi auto: planned as stable" in note and "run r1" in note
    assert builds(_recorded((True, "2.10"), (False, None)))[0] == 3  # one cell per-torch: per torch
    assert builds(_recorded((True, "2.11")))[0] == 3  # a floor above the range's oldest (2.10): per torch
    other = "s3://your-stack-bucket/sources/my-ext-0.9.tar.gz"  # another version of the source proves nothing
    assert builds(_recorded((True, "2.10"), source=other))[0] == 3


def test_a_runs_record_keeps_each_cells_abi_reading() -> None:
    from wheelfoundry.planning.calibration import cells_of

    cell = "torch2.12.0-cp312-cpu-x86_64"
    stages = [{"name": f"build-{cell}", "group": cell, "status": "succeeded", "seconds": 60, "cpu_seconds": 90}]
    manifest = {"stages": stages, "abi": {cell: {"stable": True, "floor": "2.10", "files": {}}}}
    ext = {"cells": [{"id": cell}], "source_s3": "s3://b/sources/x-1.0.tar.gz"}
    (record,) = cells_of({"extension": ext, "cuda": None}, manifest, load_config())
    assert record["abi"] == {"stable": True, "floor": "2.10", "source": "s3://b/sources/x-1.0.tar.gz"}
    (unread,) = cells_of({"extension": {"cells": [{"id": cell}]}, "cuda": None}, {"stages": stages}, load_config())
    assert "abi" not in unread


def test_stable_builds_once_per_cuda_major_with_its_oldest_toolkit_and_serves_every_variant() -> None:
    raw = {**BASE, "torch": ["2.10", "2.11"], "cuda": ["12.8", "12.6", "13.0"], "python": ["3.12"], "abi": "stable"}
    plan = plan_request(parse_request(raw, load_catalog(), load_config()), load_catalog(), load_config())
    builds = {j.cuda: [(c.torch_version, c.local_label) for c in j.extension.cells] for j in plan.jobs if j.extension}
    assert {k: [(v.rsplit(".", 1)[0], label) for v, label in cells] for k, cells in builds.items()} == {
        "12.6": [("2.10", "abi210cu12")],  # 12.6 and 12.8 share one build, with 12.6's toolkit
        "13.0": [("2.10", "abi210cu13")],
    }
    served = {
        j.cuda: sorted((c.torch_version.rsplit(".", 1)[0], c.cuda) for c in j.extension.serves)
        for j in plan.jobs
        if j.extension
    }
    assert served["12.6"] == [("2.10", "12.6"), ("2.10", "12.8"), ("2.11", "12.6"), ("2.11", "12.8")]
    assert served["13.0"] == [("2.10", "13.0"), ("2.11", "13.0")]
    (tests,) = plan.tests  # one Python: one test job, every torch x variant in it
    assert sorted(c.cuda or "cpu" for c in tests.extension.cells) == ["12.6", "12.6", "12.8", "12.8", "13.0", "13.0"]


def test_stable_builds_each_python_with_the_oldest_torch_any_variant_of_the_major_offers() -> None:
    # 12.6 leaves Python 3.13 out (an exclude, as a subscription's covered cells are): 12.8 builds it, and serves it
    raw = {**BASE, "torch": ["2.10", "2.11"], "cuda": ["12.6", "12.8"], "python": ["3.12", "3.13"], "abi": "stable"}
    raw["exclude"] = [{"cuda": "12.6", "python": "3.13"}]
    plan = plan_request(parse_request(raw, load_catalog(), load_config()), load_catalog(), load_config())
    built = {(j.cuda, c.python) for j in plan.jobs if j.extension for c in j.extension.cells}
    assert built == {("12.6", "3.12"), ("12.8", "3.13")}
    served = {(c.cuda, c.python) for j in plan.jobs if j.extension for c in j.extension.serves}
    assert served == {("12.6", "3.12"), ("12.8", "3.12"), ("12.8", "3.13")}
    tested = sorted((c.cuda, c.python) for t in plan.tests if t.extension for c in t.extension.cells)
    assert tested == sorted([("12.6", "3.12"), ("12.8", "3.12"), ("12.8", "3.13")] * 2)  # x torch 2.10, 2.11


def test_a_stable_cu12_build_serving_newer_gpus_adds_ptx_for_its_newest_arch() -> None:
    raw = {**BASE, "torch": ["2.10"], "cuda": ["12.6", "12.8"], "python": ["3.12"], "abi": "stable"}
    del raw["arch_list"]
    plan = plan_request(parse_request(raw, load_catalog(), load_config()), load_catalog(), load_config())
    (job,) = plan.jobs
    assert job.arch_list is not None and job.arch_list.endswith("9.0+PTX"), job.arch_list
    assert any("also serves GPUs it cannot compile for" in n for n in plan.notes), plan.notes


def test_a_stable_wheel_for_pypi_takes_a_public_version_one_kind_per_request() -> None:
    raw = {**BASE, "torch": ["2.10", "2.12"], "cuda": ["12.6"], "python": ["3.12"], "abi": "stable",
           "local_version": False, "options": {"publish": "pypi"}}  # fmt: skip
    plan = plan_request(parse_request(raw, load_catalog(), load_config()), load_catalog(), load_config())
    (job,) = plan.jobs
    assert job.extension is not None and job.extension.label_wheels is False  # repair adds no +abi210cu12
    assert "--local-label" not in [s for stage in render_stages(job.to_dict()) for s in stage.argv]
    with pytest.raises(RequestInvalid) as caught:
        parse_request({**raw, "cuda": ["cpu", "12.6"]}, load_catalog(), load_config())
    (issue,) = caught.value.issues
    assert issue.path == "local_version" and "gives the cpu, cu12 wheels one name" in issue.message
    with pytest.raises(RequestInvalid) as caught:
        parse_request({**raw, "local_version": True}, load_catalog(), load_config())
    (issue,) = caught.value.issues
    assert issue.path == "options.publish" and "which pypi refuses: set local_version false" in issue.message
