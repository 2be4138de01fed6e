"""A stable-ABI CUDA extension built once and tested on three torch releases from PyPI, from hosts without a GPU.

tests/fixtures/stable_cuda_ext (a CPU op and a CUDA kernel on torch::stable, TORCH_TARGET_VERSION 2.10, the limited
Python API; ``driver_version()`` links ``-lcuda``) requested with ``abi: stable`` and ``abi_build: newest`` for
torch 2.11-2.13, CUDA 13.0, Python 3.11, sm_90, on the shipped template: one build, against torch 2.13.0 (PyPI's
CUDA 13.0 build), whose one ``cp39-abi3`` wheel the test job installs as published into PyPI's torch 2.11.0,
2.12.0 and 2.13.0 and tests there. It is published once, ``+abi211cu13`` with ``Requires-Dist: torch>=2.11``, its
provenance naming the abi reading (stable, floor 2.10) and the three torch cells it was tested in. Its module names
libcuda.so.1, which no build or test host here has: the smoke stage and the test job import it with the driver
stand-in (wfbuild.wheels.driver_standin) and say so; without it this run fails at its smoke stage. A host's pip
find-links may hold a CPU build of a release (pip prefers its local label): the test points find-links at an empty
folder (tests/fixtures/no_wheels) so every cell's torch is PyPI's. bench/gpu_check_stable.py publish makes the same wheel for the GPU check
(docs/performance.md).
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.workflow.conftest import explained, run, s3_json, s3_keys, upload
from tests.workflow.test_merged import hide_system_cuda
from wheelfoundry_local import DeployedStack, EmbeddedAws

pytestmark = pytest.mark.heavy  # a real CUDA build from the repository's toolkit lock: `make test-heavy`
ROOT = Path(__file__).resolve().parents[2]
NO_WHEELS = ROOT / "tests" / "fixtures" / "no_wheels"
BUILT = "torch2.13.0-cp311-cuda13.0-x86_64"
TESTED = ["torch2.11.0-cp311-cuda13.0-x86_64", "torch2.12.0-cp311-cuda13.0-x86_64", BUILT]


@pytest.fixture
def own_environments() -> Iterator[None]:
    """Afterwards, the cached environments made with find-links at NO_WHEELS: three CUDA torch builds (about 14 GB)
    that only this test uses, removed so the heavy suite fits a CI machine's disk."""
    yield
    cache = os.environ.get("WF_CACHE_DIR")
    for ready in Path(cache).glob("envs/*/.wf-ready") if cache else ():
        try:  # wfbuild.envs writes JSON there; other cached folders (a smoke's torch wheel) write a name
            made = json.loads(ready.read_text())
        except ValueError:
            continue
        if isinstance(made, dict) and (made.get("pip_sources") or {}).get("PIP_FIND_LINKS") == str(NO_WHEELS):
            shutil.rmtree(ready.parent)


@pytest.mark.usefixtures("own_environments")
def test_a_stable_cuda_wheel_is_built_once_and_tested_on_three_pypi_torch_releases_without_a_driver(
    aws: EmbeddedAws, stack: DeployedStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_system_cuda(monkeypatch)  # the compiler comes from the lock the runner installs
    monkeypatch.setenv("PIP_FIND_LINKS", str(NO_WHEELS))  # PyPI's CUDA torch, not a CPU file on disk
    uri = upload(aws, stack, ROOT / "tests" / "fixtures" / "stable_cuda_ext", "wf-stable-cuda")
    request = {"framework": "extension", "name": "wf-stable-cuda", "source": {"s3": uri}, "cuda": ["13.0"],
               "torch": ["2.11", "2.12", "2.13"], "python": ["3.11"], "arch_list": "9.0", "abi": "stable",
               "abi_build": "newest", "torch_index": "pip", "channel": "ci", "options": {"executor": "ec2"}}  # fmt: skip
    result = run(aws, stack, request, timeout=3000)
    assert result.succeeded, explained(aws, stack, result)
    run_id = result.arn.rsplit(":", 1)[1]
    for job in ("wf-stable-cuda-cuda13.0-x86_64", "wf-stable-cuda-test-cp311-x86_64"):  # the build's smoke, the test
        log = aws.client("s3").get_object(Bucket=stack.outputs["WheelBucketName"],
                                          Key=f"runs/{run_id}/jobs/{job}/build.log")["Body"].read().decode()  # fmt: skip
        assert "needs libcuda.so.1 (cuDriverGetVersion); this host has no NVIDIA driver" in log, job
    (key,) = [k for k in s3_keys(aws, stack, "wheels/ci/wf-stable-cuda/") if k.endswith(".whl")]
    assert key.rsplit("/", 1)[1].startswith("wf_stable_cuda-0.1.0+abi211cu13-cp39-abi3-manylinux_"), key
    body = aws.client("s3").get_object(Bucket=stack.outputs["WheelBucketName"], Key=key)["Body"].read()
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [ln for ln in archive.read(meta).decode().splitlines() if ln.startswith("Requires-Dist: torch")]
        assert not [n for n in archive.namelist() if "libcuda" in n.rsplit("/", 1)[-1]]  # the driver is the user's
    assert requires == ["Requires-Dist: torch>=2.11"], requires
    statement = json.loads(base64.b64decode(s3_json(aws, stack, f"{key}.provenance.json")["payload"]))
    byproducts = {b["name"]: json.loads(base64.b64decode(b["content"])) for b in
                  statement["predicate"]["runDetails"]["byproducts"]}  # fmt: skip
    (reading,) = byproducts["abi"].values()
    assert list(reading) == [BUILT] and reading[BUILT]["stable"] is True and reading[BUILT]["floor"] == "2.10"
    assert [sorted(cells) for cells in byproducts["tested_in"].values()] == [TESTED]
