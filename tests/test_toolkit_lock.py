"""Resolving a CUDA toolkit lock from PyPI's answers (wheelfoundry.toolkits.toolkit_lock, tools/lock_cuda.py wheels).

Fed the answers recorded in tests/fixtures/toolkit_lock (record.py there re-records them): no network.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import tools.lock_cuda as lock_cuda
from tests.helpers import ROOT
from wheelfoundry.toolkits import toolkit_lock
from wheelfoundry.toolkits.toolkit_lock import SimpleIndex, ToolkitLockError

RECORDED = ROOT / "tests" / "fixtures" / "toolkit_lock"
TORCH_215 = json.loads((ROOT / "tests/fixtures/watch/pypi.org/pypi/torch/json").read_text())["info"]["requires_dist"]


def recorded(url: str, headers: Mapping[str, str]) -> bytes:
    parts = urlsplit(url)
    path = RECORDED / parts.netloc / (parts.path.strip("/") + ("/index.json" if parts.path.endswith("/") else ""))
    if not path.is_file():
        raise AssertionError(f"not recorded: {url}")
    return path.read_bytes()


@pytest.fixture
def index() -> SimpleIndex:
    return SimpleIndex(recorded)


def _pins(resolution: toolkit_lock.Resolution, part: str) -> dict[str, str]:
    return {w.name: w.version for w in resolution.wheels if w.part == part}


def test_a_cuda_13_2_lock_without_a_catalog_row_takes_pypis_newest_release(index: SimpleIndex) -> None:
    found = toolkit_lock.resolve(index, "13.2", "x86_64")
    assert found.release == "13.2.2"  # 13.2.0, 13.2.1 and 13.2.2 are recorded; 13.3+ is another CUDA
    compiler = _pins(found, "compiler")
    assert compiler["nvidia-cuda-nvcc"] == "13.2.86" and compiler["nvidia-nvvm"] == "13.2.86"
    assert {"nvidia-cuda-crt", "nvidia-cuda-cccl", "nvidia-cuda-runtime"} <= set(compiler)
    # the libraries come through the metapackage's extras; nvjitlink's `>=13.2.86,<14` takes the newest
    (line,) = found.requirements
    assert (
        line == "cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.2.2"
    )
    assert (
        "nvidia-cublas==13.4.1.3" in found.requirements[line]
        and "nvidia-nvjitlink==13.5.37" in found.requirements[line]
    )
    for wheel in found.wheels:  # every file is PyPI's x86_64 manylinux file, with PyPI's sha256
        assert wheel.file.endswith("_x86_64.whl") and len(wheel.sha256) == 64 and wheel.url.endswith(wheel.file)
    nvcc = next(w for w in found.wheels if w.name == "nvidia-cuda-nvcc")
    page = json.loads(recorded(toolkit_lock.SIMPLE.format("nvidia-cuda-nvcc"), {}))
    assert nvcc.sha256 == next(f["hashes"]["sha256"] for f in page["files"] if f["filename"] == nvcc.file)


def test_the_release_torchs_pins_name_is_the_one_locked(index: SimpleIndex) -> None:
    found = toolkit_lock.resolve(index, "13.2", "x86_64", ["cuda-toolkit[cublas,nvcc]==13.2.1"])
    assert found.release == "13.2.1" and _pins(found, "compiler")["nvidia-cuda-nvcc"] == "13.2.78"


def test_torch_2_15s_own_pins_are_locked_and_install_cuda_can_select_them(index: SimpleIndex) -> None:
    found = toolkit_lock.resolve(index, "13.2", "x86_64", TORCH_215)
    assert found.release == "13.2.2" and not found.unavailable
    assert found.requirements["nvidia-cudnn-cu13==9.26.0.51"] == ("nvidia-cudnn-cu13==9.26.0.51",)
    assert not any(line.startswith(("triton", "cuda-bindings")) for line in found.requirements)
    meta = "\n".join(f"Requires-Dist: {line}" for line in TORCH_215)
    assert toolkit_lock.torch_lines(meta, "13.2") and toolkit_lock.torch_lines(meta, "13.0") == []


def test_aarch64_reads_the_markers_for_aarch64_whatever_machine_locks(index: SimpleIndex) -> None:
    found = toolkit_lock.resolve(index, "13.2", "aarch64")
    assert found.wheels and all(w.file.endswith("_aarch64.whl") for w in found.wheels)
    assert _pins(found, "compiler")["nvidia-cuda-nvcc"] == "13.2.86"


def test_cuda_12_locks_libraries_only_its_compiler_is_redist(index: SimpleIndex) -> None:
    found = toolkit_lock.resolve(index, "12.9", "x86_64")
    assert found.release == "12.9.2.0" and not _pins(found, "compiler")  # PyPI names it 12.9.2.0
    assert all(w.name.endswith("-cu12") for w in found.wheels)


@pytest.mark.parametrize(
    ("cuda", "lines", "message"),
    [
        ("13.9", [], r"cuda: 13\.9 has no cuda-toolkit release on PyPI; it has CUDA 11\.8, .*13\.2, 13\.3"),
        ("13", [], r"cuda: '13' is not a CUDA version; expected MAJOR\.MINOR"),
        (
            "13.2",
            ["cuda-toolkit[nvcc]==13.2.9"],
            r"cuda-toolkit==13\.2\.9: not on PyPI; CUDA 13\.2 has 13\.2\.0, 13\.2\.1",
        ),
        ("13.2", ["nvidia-cublas=>1"], r"requirement: 'nvidia-cublas=>1' is not a PEP 508 requirement"),
    ],
)
def test_what_pypi_does_not_have_is_named_with_what_it_has(
    index: SimpleIndex, cuda: str, lines: list[str], message: str
) -> None:
    with pytest.raises(ToolkitLockError, match=message):
        toolkit_lock.resolve(index, cuda, "x86_64", lines)


def test_a_metapackage_whose_bytes_differ_from_the_index_is_refused() -> None:
    def tampered(url: str, headers: Mapping[str, str]) -> bytes:
        body = recorded(url, headers)
        return body + b"x" if url.endswith(".whl") else body

    with pytest.raises(ToolkitLockError, match=r"cuda_toolkit-13\.2\.2-.*not the bytes the index lists"):
        toolkit_lock.resolve(SimpleIndex(tampered), "13.2", "x86_64")


def test_the_command_the_watcher_names_writes_a_lock_install_cuda_reads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from install_cuda import select  # type: ignore[import-not-found]

    monkeypatch.setattr(lock_cuda, "fetch", recorded)
    monkeypatch.setattr(lock_cuda, "LOCKS", tmp_path)
    assert (
        lock_cuda.main(["wheels", "13.2", "--platform", "x86_64", "--requirement", "nvidia-cudnn-cu13==9.26.0.51"]) == 0
    )
    lock = tomllib.loads((tmp_path / "cuda-13.2-x86_64.toml").read_text(encoding="utf-8"))
    assert lock["release"] == "13.2.2" and lock["cuda"] == "13.2"
    wheels, missing = select(lock, ["nvidia-cudnn-cu13==9.26.0.51"])
    assert not missing and {"nvidia-cuda-nvcc", "nvidia-cudnn-cu13"} <= {w["name"] for w in wheels}
    # a CUDA that PyPI lacks: one line naming it and what there is, exit 1, no traceback, no file
    assert lock_cuda.main(["wheels", "13.9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lock_cuda: cuda: 13.9 has no cuda-toolkit release") and "Traceback" not in err
    assert not (tmp_path / "cuda-13.9-x86_64.toml").exists()
