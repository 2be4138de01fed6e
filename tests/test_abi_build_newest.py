"""``abi_build: newest`` (issue 66): a stable build compiles against the range's newest torch, as xFormers and
FlashAttention-3 do with TORCH_TARGET_VERSION set to the oldest; its wheel's floor, label, torch>= and the abi
stage's limit stay the range's oldest, so a file that does not reach it is refused as with ``oldest``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wfbuild.stages.stages import render_stages
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.errors import RequestInvalid
from wheelfoundry.planning.planning import Plan, plan_request
from wheelfoundry.request.request import parse_request

ROOT = Path(__file__).resolve().parents[1]
BASE = json.loads((ROOT / "examples" / "requests" / "extension-cuda-12.4.json").read_text())
RANGE = {"torch": ["2.11", "2.12", "2.13"], "cuda": ["13.0"], "python": ["3.12"], "arch_list": "9.0", "abi": "stable"}


def _plan(**extra: object) -> Plan:
    raw = {**BASE, **RANGE, **extra}
    return plan_request(parse_request(raw, load_catalog(), load_config()), load_catalog(), load_config())


@pytest.mark.parametrize(("build", "compiled"), [("oldest", "2.11"), ("newest", "2.13")])
def test_the_build_compiles_against_the_chosen_torch_and_keeps_the_ranges_floor(build: str, compiled: str) -> None:
    plan = _plan(abi_build=build)
    (job,) = plan.jobs
    assert job.extension is not None
    (cell,) = job.extension.cells
    assert cell.torch_version.rsplit(".", 1)[0] == compiled
    assert (cell.floor, cell.local_label) == ("2.11", "abi211cu13")  # the range's oldest either way
    stages = {s.name: s for s in render_stages(job.to_dict())}
    repair = next(s for n, s in stages.items() if n.startswith("repair"))
    abi = next(s for n, s in stages.items() if n.startswith("abi-"))
    assert repair.argv[repair.argv.index("--torch-floor") + 1] == "2.11"  # Requires-Dist: torch>=2.11
    assert abi.argv[abi.argv.index("--require-stable") + 1] == "2.11"  # a floor above 2.11 is refused
    tested = sorted(c.torch_version.rsplit(".", 1)[0] for t in plan.tests if t.extension for c in t.extension.cells)
    assert tested == ["2.11", "2.12", "2.13"]
    said = [n for n in plan.notes if n.startswith("abi_build newest")]
    assert bool(said) == (build == "newest") and all("TORCH_TARGET_VERSION" in n and "2.11" in n for n in said)


def test_newest_with_per_torch_is_refused_naming_the_field() -> None:
    with pytest.raises(RequestInvalid) as caught:
        parse_request({**BASE, **RANGE, "abi": "per-torch", "abi_build": "newest"}, load_catalog(), load_config())
    assert "abi_build" in str(caught.value) and "newest" in str(caught.value), caught.value


def test_an_unknown_build_torch_is_refused_by_the_schema() -> None:
    with pytest.raises(RequestInvalid) as caught:
        parse_request({**BASE, **RANGE, "abi_build": "latest"}, load_catalog(), load_config())
    assert "abi_build" in str(caught.value) and "latest" in str(caught.value), caught.value


def test_the_stable_example_request_builds_once_per_kind_and_python_against_torch_2_14() -> None:
    raw = json.loads((ROOT / "examples" / "requests" / "extension-stable-abi.json").read_text())
    plan = plan_request(parse_request(raw, load_catalog(), load_config()), load_catalog(), load_config())
    built = sorted((j.cuda or "cpu", c.python, c.torch_version, c.floor) for j in plan.jobs if j.extension
                   for c in j.extension.cells)  # fmt: skip
    assert built == [(k, p, "2.14.1", "2.11") for k in ("13.0", "cpu") for p in ("3.11", "3.12", "3.13")], built
    tested = [c for t in plan.tests if t.extension for c in t.extension.cells]
    assert len(tested) == 4 * 2 * 3  # every torch x kind x Python, the published bytes
