"""Reading torch's releases from the recorded indexes: PyPI's PEP 691 JSON, its METADATA, PyTorch's index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from wheelfoundry_cli.watch_local import recorded

from tests.watch_support import RECORDED, upstream
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.catalog.upstream_index import cuda_of, html_files, linux_wheel, pypi_files, requires_dist_text
from wheelfoundry.publishing.coverage import Coverage
from wheelfoundry.watch.watch_facts import release_facts


def test_pypi_json_gives_every_final_minor_with_its_newest_patch_and_pythons() -> None:
    releases = {r.minor: r for r in upstream().torch}
    assert releases["2.12"].versions == ("2.12.0", "2.12.1")
    assert releases["2.14"].version == "2.14.1"
    assert releases["2.15"].python == ("3.11", "3.12", "3.13", "3.14", "3.15")  # no 3.14t / 3.15t: not cells
    assert releases["2.15"].platforms == ("aarch64", "x86_64")


def test_the_new_releases_cuda_comes_from_its_pypi_wheels_metadata() -> None:
    release = {r.minor: r for r in upstream().torch}["2.15"]
    assert release.pypi_cuda == "13.2"  # Requires-Dist: cuda-toolkit[...]==13.2.2
    assert release.sources["pypi_cuda"] == "https://pypi.org/pypi/torch/json"  # no PEP 658 file announced


def test_pytorchs_index_gives_each_variant_its_platforms_and_pythons() -> None:
    release = {r.minor: r for r in upstream().torch}["2.15"]
    assert set(release.variants) == {"cpu", "cu126", "cu130", "cu132", "rocm7.1", "xpu"}
    assert release.variants["cu130"] == {
        "aarch64": ("3.11", "3.12", "3.13", "3.14", "3.15"),
        "x86_64": ("3.11", "3.12", "3.13", "3.14", "3.15"),
    }
    assert "aarch64" not in release.variants["cu126"]


def test_facts_of_a_release_the_catalog_lacks_keep_only_the_cuda_variants_it_can_build() -> None:
    release = {r.minor: r for r in upstream().torch}["2.15"]
    facts = release_facts(release, SpecifierSet(">=2.11"), load_catalog(), True)
    assert facts is not None and facts.derived is not None
    assert facts.variants["x86_64"] == ("cpu", "12.6", "13.0", "13.2")  # ROCm and XPU are not this farm's
    assert facts.variants["aarch64"] == ("cpu", "13.0")
    assert facts.derived.cuda == ("12.6", "13.0", "13.2") and facts.derived.aarch64_cuda == ("13.0",)
    assert facts.derived.release().patches == (0,)


def test_without_pytorchs_index_only_pypis_variant_is_known_and_that_is_said(tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "rec"
    shutil.copytree(RECORDED / "pypi.org", root / "pypi.org")
    seen = upstream(root)
    assert not seen.pytorch_index_read and "PyTorch's index not read" in seen.problems[0]
    release = {r.minor: r for r in seen.torch}["2.15"]
    facts = release_facts(release, SpecifierSet(), load_catalog(), False)
    assert facts is not None and facts.variants["x86_64"] == ("13.2",)
    assert any("only PyPI's is known (CUDA 13.2)" in p for p in facts.problems)


def test_linux_wheel_names() -> None:
    assert linux_wheel("torch-2.15.0+cu130-cp311-cp311-manylinux_2_28_aarch64.whl") is not None
    assert linux_wheel("torch-2.15.0-cp314-cp314t-manylinux_2_28_x86_64.whl") is None  # free-threaded
    assert linux_wheel("torch-2.15.0-cp311-cp311-win_amd64.whl") is None
    assert linux_wheel("torch-2.10.0-3-cp310-cp310-manylinux_2_28_x86_64.whl") is not None  # a build tag
    assert cuda_of("cu130") == "13.0" and cuda_of("cu118") == "11.8" and cuda_of("rocm7.1") is None


def test_html_and_json_pages_parse_the_same_files() -> None:
    page = (RECORDED / "download.pytorch.org/whl/torch/index.html").read_text()
    files = html_files(page, "https://download.pytorch.org/whl/torch/")
    first = files[0]
    assert first.filename == "torch-2.14.1+cpu-cp310-cp310-manylinux_2_28_aarch64.whl"
    assert first.url == "https://download.pytorch.org/whl/cpu/torch-2.14.1%2Bcpu-cp310-cp310-manylinux_2_28_aarch64.whl"
    assert first.sha256 and first.core_metadata
    body = (RECORDED / "pypi.org/simple/torch/index.json").read_bytes()
    assert all(f.url.startswith("https://files.pythonhosted.org/") for f in pypi_files(body, "https://pypi.org/"))


def test_requires_dist_text_reads_as_metadata() -> None:
    info = json.loads((RECORDED / "pypi.org/pypi/torch/json").read_text())["info"]
    text = requires_dist_text(info)
    assert "Requires-Dist: cuda-toolkit[" in text and text.endswith("Requires-Python: >=3.11\n")


def test_a_recording_cannot_be_left_through_its_urls() -> None:
    from wheelfoundry.aws.watch import FetchFailed

    with pytest.raises(FetchFailed, match="outside the recording"):
        recorded(RECORDED)("https://pypi.org/../../../etc/passwd", {})


def test_coverage_reads_merged_and_abi3_wheels() -> None:
    state = {
        "wheels": {
            "wheels/c/p/p_ext-1.0-cp311-cp311-manylinux_2_28_x86_64.whl": {
                "variants": ["torch-2.13.0+cpu", "torch-2.14.1+cu130"]
            },
            "wheels/c/p/p_ext-1.0+pt213cpu-cp39-abi3-manylinux_2_28_aarch64.whl": {"variants": ["torch-2.13.0+cpu"]},
            "wheels/c/p/p_ext-1.0-cp312-cp312-manylinux_2_28_x86_64.whl": {},  # no variants recorded: serves none
        }
    }
    cov = Coverage.of([state])
    assert cov.has("p-ext", "1.0", "3.11", "x86_64", "2.14", "cu130")
    assert cov.has("P_Ext", None, "3.11", "x86_64", "2.13", "cpu")
    assert not cov.has("p-ext", "1.0", "3.11", "x86_64", "2.14", "cpu")
    assert not cov.has("p-ext", "1.0", "3.12", "x86_64", "2.13", "cpu")
    assert not cov.has("p-ext", "1.1", "3.11", "x86_64", "2.13", "cpu")
    assert cov.has("p-ext", "1.0", "3.13", "aarch64", "2.13", "cpu")  # abi3 from 3.9 on
    assert not cov.has("p-ext", "1.0", "3.8", "aarch64", "2.13", "cpu")
    assert cov.has_version("p-ext", "1.0") and not cov.has_version("p-ext", "2.0")
