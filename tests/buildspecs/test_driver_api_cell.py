"""An extension that calls the CUDA driver API builds in a CUDA 13.0 cell from the locked toolkit.

examples/extension-driver-api calls ``cuDriverGetVersion`` and links ``-lcuda``, as FlashAttention-3's
Hopper build does. Before the driver stub, its CUDA 13.0 cells failed at link: ``/usr/bin/ld: cannot find
-lcuda`` (a home assembled from PyPI's nvidia-* wheels has no lib64/stubs/libcuda.so). Here the runner
builds one cell in host mode against moto, with the toolkit it installs from the repository's lock and no
CUDA of this machine's in sight: the wheel links, names ``libcuda.so.1`` (the user's driver), and carries
no libcuda. Importing it where a driver is present is the GPU step's (tests/workflow, GPU machines).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from tests.buildspecs import test_runner
from tests.buildspecs.jobs import ROOT, TODAY
from tests.buildspecs.test_runner import Aws, runner_env, tarball
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request

moto_endpoint = test_runner.moto_endpoint  # the runner tests' moto server fixture, for this module too
pytestmark = pytest.mark.heavy  # installs the CUDA 13.0 lock and builds a CUDA cell: `make test-heavy`
EXAMPLE = ROOT / "examples" / "extension-driver-api"


@pytest.fixture
def aws(moto_endpoint: str) -> Aws:
    return Aws(moto_endpoint, "us-west-1")  # Aws takes the next unused region if another module has this one


def _job(aws: Aws, source: bytes) -> tuple[dict[str, Any], str]:
    raw = {"framework": "extension", "name": "wf-driver-api", "source": {"s3": f"s3://{aws.bucket}/src.tar.gz"},
           "torch": ["2.14"], "cuda": ["13.0"], "python": ["3.11"], "arch_list": "9.0",
           "torch_index": "pip"}  # fmt: skip
    aws.s3.put_object(Bucket=aws.bucket, Key="src.tar.gz", Body=source)
    (planned,) = plan_request(parse_request(raw), load_catalog(), load_config(), today=TODAY).jobs
    job = planned.to_dict()
    prefix = f"runs/run-1/jobs/{job['id']}/"
    job["run"] = {"id": "run-1", "bucket": aws.bucket, "prefix": prefix, "channel": "dev", "ecr_repository": "",
                  "region": aws.region}  # fmt: skip
    aws.s3.put_object(Bucket=aws.bucket, Key=f"{prefix}job.json", Body=json.dumps(job).encode())
    return job, f"{prefix}job.json"


def _needed(data: bytes) -> list[str]:
    dynamic = ELFFile(io.BytesIO(data)).get_section_by_name(".dynamic")
    assert isinstance(dynamic, DynamicSection)
    return [str(getattr(t, "needed", "")) for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED"]


@pytest.mark.timeout(1800)
def test_a_driver_api_extension_links_lcuda_in_a_locked_cuda_13_cell(
    aws: Aws, cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a build host without a CUDA toolkit or driver looks like: the runner's toolkit is the only one.
    path = [p for p in os.environ["PATH"].split(os.pathsep) if p and not (Path(p) / "nvcc").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    for name in ("CUDA_HOME", "CUDA_PATH", "CUDACXX", "LIBRARY_PATH"):
        monkeypatch.delenv(name, raising=False)
    src = tmp_path / "src"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so"))
    _, job_key = _job(aws, tarball(src, "wf-driver-api-0.1.0"))
    execution, token = aws.task_token()
    env = runner_env(aws, job_key, token, tmp_path / "work", cache_dir)
    proc = subprocess.run([sys.executable, "-m", "wfbuild.runner.runner"], env=env, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    assert "cannot find -lcuda" not in log, "the cell's link found no driver stub"
    assert proc.returncode == 0, log[-6000:]
    output = json.loads(aws.finished(execution)["output"])
    assert output["status"] == "succeeded", output

    manifest = json.loads(aws.text(output["manifest_key"]))
    toolkit = manifest["toolchain"]["cuda_toolkit"]
    assert "/toolkits/cuda13.0-x86_64-" in toolkit["cuda_home"] and toolkit["release"] == "13.0.2"
    assert toolkit["driver_stub"]["libcuda.so"] == "generated", toolkit  # from the lock's own cuda.h
    (wheel,) = output["wheels"]
    body = aws.s3.get_object(Bucket=aws.bucket, Key=wheel["key"])["Body"].read()
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        names = archive.namelist()
        assert not [n for n in names if "libcuda" in n.rsplit("/", 1)[-1]], names  # the driver is the user's
        (module,) = [n for n in names if n.startswith("wf_driver_api/_C") and n.endswith(".so")]
        needed = _needed(archive.read(module))
    assert "libcuda.so.1" in needed, needed  # linked against the stub, resolved by the driver at import
