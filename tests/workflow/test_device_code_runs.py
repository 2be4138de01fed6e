"""A CUDA build holds the CUDA code it claims (issue 47), through the shipped template and ASL.

Real builds on this host, CUDA 13.0, arch 9.0: torch 2.14.1+cu130 from the package index, nvcc from the
repository's lock, every system CUDA hidden. Two small packages (tests/fixtures):
- switch_cuda_ext compiles its CUDA kernel only with its own SWITCH_OPS_FORCE_CUDA=1 (as torch-harmonics does
  with FORCE_CUDA_EXTENSION=1): without it the cell is refused with the device-code reason and nothing is
  published; with it in build_env the wheel is published and its manifest and signed provenance list sm_90;
- fixed_arch_ext names its own architectures (-gencode arch=compute_80,code=sm_80, no PTX): refused, naming 9.0.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.workflow.conftest import explained, extension_request, run, s3_json, s3_keys, upload
from tests.workflow.test_merged import hide_system_cuda
from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_user import archs

pytestmark = pytest.mark.heavy  # real CUDA builds: `make test-heavy` (.ci/heavy), not `make test`
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CELL = "torch2.14.1-cp311-cuda13.0-x86_64"


def _request(aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path, fixture: str, name: str, **extra: Any) -> Any:
    folder = tmp_path / fixture
    shutil.copytree(FIXTURES / fixture, folder, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    uri = upload(aws, stack, folder, name)
    return extension_request(uri, name=name, torch=["2.14"], cuda=["13.0"], arch_list="9.0", **extra)


def _manifest(aws: EmbeddedAws, stack: DeployedStack, run_id: str, name: str) -> dict[str, Any]:
    return dict(s3_json(aws, stack, f"runs/{run_id}/jobs/{name}-cuda13.0-x86_64/manifest.json"))


def _nothing_published(aws: EmbeddedAws, stack: DeployedStack, name: str) -> None:
    assert s3_keys(aws, stack, f"wheels/ci/{name}/") == []
    assert [k for k in s3_keys(aws, stack, "simple/ci/") if name in k] == []


@pytest.mark.timeout(2400)
def test_a_cuda_cell_of_a_package_whose_kernels_hide_behind_its_own_switch_is_refused_then_built_with_it(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_system_cuda(monkeypatch)
    name = "wf-switch-ops"
    result = run(aws, stack, _request(aws, stack, tmp_path, "switch_cuda_ext", name), timeout=1500)
    assert result.status == "FAILED" and result.error == "JobsFailed", (result.error, result.cause)
    why = explained(aws, stack, result)
    assert f"at stage devicecode-{CELL}" in why, why
    assert f"DEVICE CODE REFUSED: cell {CELL} (CUDA 13.0, arch list 9.0): no compiled file holds device code" in why
    assert "_C.cpython-311-x86_64-linux-gnu.so: host code only" in why
    assert "its build files read SWITCH_OPS_FORCE_CUDA" in why and "build_env" in why
    run_id = result.arn.rsplit(":", 1)[1]
    manifest = _manifest(aws, stack, run_id, name)
    record = manifest["device_code"][CELL]
    assert record["status"] == "refused" and record["sass"] == [] and record["ptx"] == []
    assert [s["status"] for s in manifest["stages"] if s["name"] in (f"repair-{CELL}", f"smoke-{CELL}")] == [
        "skipped",
        "skipped",
    ]  # nothing of the cell was repaired or tested ...
    _nothing_published(aws, stack, name)  # ... or published
    (line,) = [ln for ln in archs.lines({"job": manifest}) if CELL in ln]
    assert "REFUSED, no compiled file holds device code" in line

    switched = _request(
        aws, stack, tmp_path / "again", "switch_cuda_ext", name, build_env={"SWITCH_OPS_FORCE_CUDA": "1"}
    )
    result = run(aws, stack, switched, timeout=1500)
    assert result.succeeded, explained(aws, stack, result)
    run_id = result.arn.rsplit(":", 1)[1]
    manifest = _manifest(aws, stack, run_id, name)
    record = manifest["device_code"][CELL]
    assert record["status"] == "ok" and record["sass"] == ["sm_90"] and record["serves"] == {"9.0": ["sm_90"]}
    (so,) = [f for f in record["files"] if f.endswith(".so")]
    assert record["files"][so]["sass"] == ["sm_90"]
    (wheel,) = manifest["wheels"]
    assert wheel["device_code"]["sass"] == ["sm_90"]
    published = [k for k in s3_keys(aws, stack, f"wheels/ci/{name}/") if k.endswith(".whl")]
    assert len(published) == 1, published
    envelope = s3_json(aws, stack, published[0] + ".provenance.json")
    statement = json.loads(base64.b64decode(envelope["payload"]))
    byproducts = {b["name"]: b["content"] for b in statement["predicate"]["runDetails"]["byproducts"]}
    signed = json.loads(base64.b64decode(byproducts["device_code"]))
    assert signed[f"{name}-cuda13.0-x86_64"][CELL]["files"][so]["sass"] == ["sm_90"]
    report = s3_json(aws, stack, f"runs/{run_id}/report.json")
    assert report["device_code"][CELL]["sass"] == ["sm_90"]


@pytest.mark.timeout(1800)
def test_a_package_that_compiles_other_architectures_is_refused_naming_the_missing_one(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_system_cuda(monkeypatch)
    name = "wf-fixed-arch-ops"
    result = run(aws, stack, _request(aws, stack, tmp_path, "fixed_arch_ext", name), timeout=1500)
    assert result.status == "FAILED" and result.error == "JobsFailed", (result.error, result.cause)
    why = explained(aws, stack, result)
    assert f"DEVICE CODE REFUSED: cell {CELL} (CUDA 13.0, arch list 9.0): no code for 9.0" in why, why
    assert "_C.cpython-311-x86_64-linux-gnu.so: SASS sm_80" in why
    assert "sets its own architectures instead of TORCH_CUDA_ARCH_LIST (arch=compute_80,code=sm_80" in why
    record = _manifest(aws, stack, result.arn.rsplit(":", 1)[1], name)["device_code"][CELL]
    assert record["missing"] == ["9.0"] and record["sass"] == ["sm_80"] and record["ptx"] == []
    _nothing_published(aws, stack, name)
