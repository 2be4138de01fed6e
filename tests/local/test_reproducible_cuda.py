"""CUDA wheels are reproducible too: two `wheelfoundry local run`s of a CUDA 13.0 cell of examples/extension
(its kernels sit in an anonymous namespace: internal-linkage device code), each from its own working
directory (own emulated stack, state dir, instance work folder and compiler cache), give byte-identical
wheels. nvcc comes from the repository's CUDA 13.0 lock (the runner installs it into WF_CACHE_DIR), with
every system CUDA hidden; torch 2.14.1+cu130 from the package index.

Built without ninja (the PyG packages' way: torch runs $CUDA_HOME/bin/nvcc itself, and the launcher reaches
it through wfbuild.compiling.cuda_home's shim), a CUDA cell is held to the same bytes from two folders by
tests/buildspecs/test_nvcc_threads.py's PyG-layout test."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from tests.helpers import assert_compiled
from tests.local.test_reproducible_runs import ROOT, wheelfoundry
from tests.workflow.test_merged import hide_system_cuda

pytestmark = pytest.mark.heavy  # several real builds: `make test-heavy` (.ci/heavy), not `make test`

REQUEST = {
    "framework": "extension",
    "name": "wf-example-ops",
    "source": {"s3": "s3://replaced-by-local-run/sources/wf-example-ops.tar.gz"},
    "torch": ["2.14"],
    "cuda": ["13.0"],
    "python": ["3.11"],
    "platforms": ["x86_64"],
    "arch_list": "9.0",
    "torch_index": "pip",
    "channel": "demo",
}


def _run(request: Path, cwd: Path, source: Path = ROOT / "examples" / "extension") -> Path:
    cwd.mkdir(parents=True)
    done = wheelfoundry("local", "run", str(request), "--source", str(source), cwd=cwd)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = (cwd / "dist").glob("*.whl")
    return wheel


def _cuda_objects(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as zf:
        return {n: zf.read(n) for n in zf.namelist() if n.endswith(".so")}


@pytest.mark.timeout(2400)
def test_two_local_runs_of_a_cuda_cell_from_different_folders_give_identical_wheels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_system_cuda(monkeypatch)
    request = tmp_path / "cuda.json"
    request.write_text(json.dumps(REQUEST))
    first = _run(request, tmp_path / "one" / "extension")
    second = _run(request, tmp_path / "elsewhere" / "two" / "extension")
    for folder in (tmp_path / "one", tmp_path / "elsewhere" / "two"):
        assert_compiled(folder)  # both compiled their CUDA file: two builds, not one served twice
    assert first.name == second.name, (first.name, second.name)
    (so,) = _cuda_objects(first).values()
    assert b"_GLOBAL__N__" in so, "no internal-linkage device code in the CUDA build: the test proves nothing"
    a, b = (hashlib.sha256(w.read_bytes()).hexdigest() for w in (first, second))
    assert a == b, f"{first.name}: the two runs' wheels differ: {a} vs {b}"
