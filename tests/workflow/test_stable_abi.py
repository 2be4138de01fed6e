"""One wheel for every torch (issue 66) through the shipped template and ASL, with real builds on this host.

tests/fixtures/stable_ext (its op on torch::stable, TORCH_TARGET_VERSION 2.10) requested with ``abi: stable``
over torch 2.13 and 2.14 (CPU, Python 3.11): one build, against torch 2.13; the test job installs that wheel,
as published, into torch 2.13.0's and torch 2.14.1's environments; it is published once, requiring
``torch>=2.13``, listed on both torch releases' pages, its provenance naming both. The same package with an
``at::`` call slipped in is refused at its abi stage, naming the file and the symbol, and nothing is published.
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from tests.workflow.conftest import explained, extension_request, run, s3_json, s3_keys, upload
from wheelfoundry_local import DeployedStack, EmbeddedAws

pytestmark = pytest.mark.heavy  # real builds through the state machine: `make test-heavy` (.ci/heavy)
ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "stable_ext"
CELLS = ["torch2.13.0-cp311-cpu-x86_64", "torch2.14.1-cp311-cpu-x86_64"]


def _source(tmp_path: Path, slip: bool = False) -> Path:
    folder = tmp_path / ("slipped" if slip else "stable")
    shutil.copytree(FIXTURE, folder, ignore=shutil.ignore_patterns("__pycache__", "build", "*.so", "*.egg-info"))
    if slip:  # what WF_ABI_SLIP=1 builds: an at:: call, no TORCH_TARGET_VERSION (setup.py's switch, set in the file)
        setup = folder / "setup.py"
        setup.write_text(setup.read_text().replace('os.environ.get("WF_ABI_SLIP") == "1"', "True"))
    return folder


def _request(aws: EmbeddedAws, stack: DeployedStack, folder: Path) -> dict[str, object]:
    uri = upload(aws, stack, folder, "wf-stable")
    return extension_request(uri, name="wf-stable", torch=["2.13", "2.14"], abi="stable")


def test_a_stable_wheel_is_built_once_tested_on_each_torch_and_published_once(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    result = run(aws, stack, _request(aws, stack, _source(tmp_path)), timeout=1200)
    assert result.succeeded, explained(aws, stack, result)
    run_id = result.arn.rsplit(":", 1)[1]
    jobs = [k.split("/")[3] for k in s3_keys(aws, stack, f"runs/{run_id}/jobs/") if k.endswith("/job.json")]
    (build,) = [j for j in jobs if "-test-" not in j]
    contract = s3_json(aws, stack, f"runs/{run_id}/jobs/{build}/job.json")["extension"]
    assert [c["id"] for c in contract["cells"]] == [CELLS[0]] and [c["id"] for c in contract["serves"]] == CELLS
    reading = s3_json(aws, stack, f"runs/{run_id}/jobs/{build}/manifest.json")["abi"][CELLS[0]]
    assert reading["stable"] is True and reading["floor"] == "2.10", reading

    (key,) = [k for k in s3_keys(aws, stack, "wheels/ci/wf-stable/") if k.endswith(".whl")]
    name = key.rsplit("/", 1)[1]
    assert name.startswith("wf_stable-0.1.0+abi213cpu-cp311-cp311-"), name  # one wheel: its floor and variant
    body = aws.client("s3").get_object(Bucket=stack.outputs["WheelBucketName"], Key=key)["Body"].read()
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [ln for ln in archive.read(meta).decode().splitlines() if ln.startswith("Requires-Dist: torch")]
    assert requires == ["Requires-Dist: torch>=2.13"], requires
    (test_job,) = [j for j in jobs if "-test-" in j]
    stages = s3_json(aws, stack, f"runs/{run_id}/jobs/{test_job}/manifest.json")["stages"]
    tested = sorted(s["name"].removeprefix("test-") for s in stages if s["name"].startswith("test-"))
    assert tested == CELLS and all(s["status"] == "succeeded" for s in stages if s["name"].startswith("test-"))
    for cell in ("torch-2.13.0+cpu", "torch-2.14.1+cpu"):  # the one wheel on each torch release's page
        page = aws.client("s3").get_object(Bucket=stack.outputs["WheelBucketName"], Key=f"simple/ci/{cell}.html")
        assert name in page["Body"].read().decode(), cell
    envelope = s3_json(aws, stack, key + ".provenance.json")
    statement = json.loads(base64.b64decode(envelope["payload"]))
    byproducts = {b["name"]: b for b in statement["predicate"]["runDetails"]["byproducts"]}
    assert json.loads(base64.b64decode(byproducts["tested_in"]["content"])) == {test_job: CELLS}


def test_a_stable_request_refuses_a_per_torch_build_naming_the_symbol(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    result = run(aws, stack, _request(aws, stack, _source(tmp_path, slip=True)), timeout=1200)
    assert result.status == "FAILED", result.status
    shown = explained(aws, stack, result)
    assert "ABI REFUSED" in shown and "wf_stable/csrc.so" in shown and "at::" in shown, shown
    assert s3_keys(aws, stack, "wheels/ci/") == []
