"""Issue 34 in container mode: a CUDA 13.0 cell of examples/extension (its kernels sit in an anonymous
namespace: internal-linkage device code) built in the Docker test bed's CUDA builder image
(tools/docker_testbed_cuda.py: the production install_cuda.sh and the CUDA 13.0 lock) by two
`wheelfoundry local run`s, each from its own folder, with its own stack, instances and work dirs, gives
byte-identical wheels. In a container the build always sits at /work; what must not vary besides is
nvcc's per-compilation parts (internal-linkage names, PID- or time-named intermediates in the objects).

Plain nvcc's objects depend on its process ids, and a container's fresh PID namespace gives two builds
the same ids only while both spawn the same processes in the same order. A real build's process count is
no promise (pip's build isolation, a retried download, a cache hit against a miss), so the source's
setup.py first runs a random number (1 to 1000) of short processes. Observed, not explained: with the
launcher off (wf_nvcc_launcher returning at once) this test passed as well (docs/provenance.md), so it
holds container builds to the same bytes, not the launcher to being the reason.

Both runs' stages read torch's CUDA environment from the machine's cache (wfbuild.images.container.CACHE_DIR), as
a local run's do: the first run's env stage makes it (about 35 s; none with the cache kept), and the second
run's says it reused it. Each run still compiles (tests/helpers.py assert_compiled)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from tests.container.conftest import build_in, unavailable
from tests.helpers import assert_compiled
from tests.local.test_reproducible_cuda import REQUEST, ROOT, _cuda_objects, _run
from tests.workflow.test_merged import hide_system_cuda
from tools.docker_testbed_cuda import build_cuda_builder
from wfbuild.cuda import toolkit
from wfbuild.images import container
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request

SPAWNS = """import secrets as _wf_secrets, subprocess as _wf_subprocess
for _ in range(1 + _wf_secrets.randbelow(1000)):  # another pid for nvcc in each build (module docstring)
    _wf_subprocess.run(["true"], check=True)
"""
pytestmark = pytest.mark.heavy  # two CUDA builds in Docker: `make test-heavy` (.ci/heavy, after `make docker`)


@pytest.fixture
def cuda_container_mode(monkeypatch: pytest.MonkeyPatch, docker_testbed: ModuleType, builder_image: str) -> str:
    """The local agent runs the stages in the CUDA builder made for REQUEST's job (its CUDA_REQUIREMENTS)."""
    (job,) = plan_request(parse_request(REQUEST), load_catalog(), load_config()).jobs
    try:
        image = str(build_cuda_builder("13.0", toolkit.requirements_of(job.to_dict())))
    except Exception as exc:  # a build that cannot finish here is the same verdict as no engine
        unavailable(f"the CUDA builder image could not be built: {exc}")
        raise
    return build_in(monkeypatch, docker_testbed, image)


@pytest.mark.timeout(2400)
def test_two_container_builds_of_a_cuda_cell_from_different_folders_give_identical_wheels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cuda_container_mode: str
) -> None:
    hide_system_cuda(monkeypatch)  # the toolkit is the image's, not this host's
    source = tmp_path / "source"
    shutil.copytree(ROOT / "examples" / "extension", source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    setup = source / "setup.py"
    setup.write_text(SPAWNS + setup.read_text())
    request = tmp_path / "cuda.json"
    request.write_text(json.dumps(REQUEST))
    first = _run(request, tmp_path / "one" / "extension", source)
    second = _run(request, tmp_path / "elsewhere" / "two" / "extension", source)
    for folder in (tmp_path / "one", tmp_path / "elsewhere" / "two"):
        logs = "\n".join(p.read_text(errors="replace") for p in folder.rglob("*.log") if p.is_file())
        assert f"builder image {cuda_container_mode} (WF_BUILDER_IMAGE" in logs, f"{folder}: not built in the image"
        assert_compiled(folder)  # both compiled their CUDA file: two builds, not one served twice
    # The second run's stages (``logs``: the last folder's) found torch's environment in the machine's cache
    # (wfbuild.images.container.CACHE_DIR), made by the first run's (or an earlier one's) env stage, not installed again
    assert f"reusing cached environment {container.CACHE_DIR}/envs/" in logs, "no cached environment"
    assert first.name == second.name, (first.name, second.name)
    (so,) = _cuda_objects(first).values()
    assert b"_GLOBAL__N__" in so, "no internal-linkage device code in the CUDA build: the test proves nothing"
    a, b = (hashlib.sha256(w.read_bytes()).hexdigest() for w in (first, second))
    assert a == b, f"{first.name}: the two container builds' wheels differ: {a} vs {b}"
