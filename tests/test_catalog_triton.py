"""The triton requirement of slim CUDA torch wheels (per exact version); readers of published wheels and older files."""

from __future__ import annotations

from pathlib import Path

from wheelfoundry_cli import upstream
from wheelfoundry_cli.upstream_facts import needed_env, read_files

from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request


def test_triton_follows_the_exact_torch_version() -> None:
    catalog = load_catalog()
    release = catalog.release("2.3")
    assert release is not None
    # upstream's 2.3.0 and 2.3.1 CUDA wheels pin the same nvidia-* wheels but different tritons
    assert catalog.cuda_requirements(release, "12.1", "2.3.0")[-1] == "triton==2.3.0; python_version < '3.12'"
    assert catalog.cuda_requirements(release, "12.1", "2.3.1")[-1] == "triton==2.3.1; python_version < '3.12'"
    assert catalog.cuda_requirements(release, "12.1", "2.3.0rc2")[-1] == "triton==2.3.0; python_version < '3.12'"
    assert not any(r.startswith("triton") for r in catalog.cuda_requirements(release, "12.1", None))
    old = catalog.release("1.13")
    assert not any(r.startswith("triton") for r in catalog.cuda_requirements(old, "11.7", "1.13.1"))
    assert catalog.cuda_requirements(catalog.release("1.12"), "11.3", "1.12.1") == ()  # no pins: no slim wheel


def test_planned_cuda_job_carries_triton() -> None:
    catalog, config = load_catalog(), load_config()
    raw = {
        "version": "2.5.1",
        "python": ["3.12"],
        "targets": [{"platform": "x86_64", "accelerator": "cuda", "cuda": "12.4"}],
    }
    (job,) = plan_request(parse_request(raw, catalog, config), catalog, config).jobs
    assert job.requirements[-1] == "triton==3.1.0; python_version < '3.13'"
    assert job.env["PYTORCH_EXTRA_INSTALL_REQUIREMENTS"].endswith(" | triton==3.1.0; python_version < '3.13'")


def test_readers_of_older_upstream_files() -> None:
    metadata = (
        'Requires-Dist: nvidia-cuda-runtime-cu12 (==12.4.127) ; platform_system == "Linux"\n'
        'Requires-Dist: triton (==3.1.0) ; platform_system == "Linux" and python_version < "3.13"\n'
        'Requires-Dist: sympy (==1.13.1) ; python_version >= "3.9"\n'
        "Requires-Dist: optree (>=0.12.0) ; extra == 'optree'\n"
    )
    assert upstream.metadata_requirements(metadata) == (
        'nvidia-cuda-runtime-cu12==12.4.127; platform_system == "Linux"',
        'triton==3.1.0; platform_system == "Linux" and python_version < "3.13"',
    )
    assert upstream.metadata_cuda(metadata) == "12.4"
    assert upstream.build_strings_abi(" -D_GLIBCXX_USE_CXX11_ABI=0 -fabi-version=11 -O2\n") is False
    assert upstream.build_strings_abi("-gencode;arch=compute_90,code=sm_90\n_ZNK2at10TensorBase8toStringB5cxx11Ev\n")
    assert upstream.build_strings_abi("_ZNK2at10TensorBase8toStringEv\n") is False
    assert upstream.build_strings_abi("-gencode;arch=compute_90,code=sm_90\n") is None
    # test-infra's matrix of the 1.12/1.13 days spelled the dict CUDA_ACRHES_DICT
    old = 'FULL_PYTHON_VERSIONS = ["3.7", "3.10"]\nCUDA_ACRHES_DICT = {"test": ["10.2", "11.3"]}\n'
    assert upstream.read_matrix(old) == upstream.Matrix(("3.7", "3.10"), ("10.2", "11.3"), {})


def test_aarch64_versions_from_a_wheels_libraries(tmp_path: Path) -> None:
    (tmp_path / "aarch64-strings.txt").write_text("OpenBLAS 0.3.28 DYNAMIC_ARCH\narm_compute_version=v24.09\n")
    facts = read_files(tmp_path, load_catalog().release("2.6"), {"aarch64_strings": "PyPI torch-2.6.0 aarch64"})
    assert (facts.acl, facts.openblas, facts.provenance["aarch64"]) == ("v24.09", "v0.3.28", "PyPI torch-2.6.0 aarch64")


def test_build_switches_from_a_cuda_wheels_needed_libraries() -> None:
    needed = "libtorch_cuda.so NEEDED [libcudart.so.12]\nlibtorch_cuda.so NEEDED [libcusparseLt-294d6944.so.0]\n"
    needed += "libtorch_cuda.so NEEDED [libnccl.so.2]\n"
    # no libcupti / libcufile: nothing is said about USE_CUPTI_SO / USE_CUFILE (they may be dlopen'ed)
    assert needed_env(needed) == {"USE_CUDA_STATIC_LINK": "0", "USE_STATIC_NCCL": "0", "USE_CUSPARSELT": "1"}
