"""Every catalog fact has a source, and the catalog agrees with upstream's facts (catalog verify).

The fixtures under tests/fixtures/upstream/ are facts extracted from upstream files with
`wheelfoundry catalog extract` (values plus provenance: repository, ref, commit, path), not copies of
those files. The readers of the real files are tested here on small snippets written for the tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from wheelfoundry_cli import catalog_docs, upstream
from wheelfoundry_cli.catalog_verify import compare, source_problems
from wheelfoundry_cli.main import main
from wheelfoundry_cli.upstream_facts import FACTS_FILE, read_facts_toml

from wheelfoundry.catalog.catalog import catalog_from_text, load_catalog

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "upstream"
CATALOG_TOML = ROOT / "functions" / "wheelfoundry" / "data" / "catalog.toml"


def test_every_release_fact_has_a_source() -> None:
    assert source_problems(load_catalog()) == []


def test_a_fact_without_a_source_is_reported() -> None:
    text = CATALOG_TOML.read_text(encoding="utf-8")
    start = text.index('torch = "2.5"')
    at = text.index('arch_list = "builder-2.5:', start)
    broken = catalog_from_text(text[:at] + 'arch_list = "somewhere"' + text[text.index("\n", at) :])
    assert source_problems(broken) == ["2.5: arch_list has no usable source ('somewhere')"]


@pytest.mark.parametrize(
    ("minor", "compared", "explained"),
    [
        *[(m, 6, 0) for m in ("2.1", "2.2", "2.3", "2.4")],
        *[(m, 15, 0) for m in ("2.7", "2.8", "2.9")],
        # ACL v52.8.0 where upstream used v52.6.0 / v53.2.0 (no public digest for those; [explained])
        *[(m, 15, 1) for m in ("2.10", "2.12", "2.14")],
        ("1.12", 4, 1),  # aarch64: OpenBLAS v0.3.19 and no oneDNN/ACL by default, as upstream
        ("1.13", 18, 5),
        ("2.0", 6, 0),
        ("2.5", 63, 5),
        ("2.6", 12, 0),
        ("2.11", 14, 1),
        ("2.13", 20, 2),
        ("nightly", 33, 2),
    ],
)
def test_catalog_matches_upstream_facts(minor: str, compared: int, explained: int) -> None:
    facts = read_facts_toml(FIXTURES / f"torch-{minor}" / FACTS_FILE)
    assert all(
        source.startswith(("pytorch/", "PyPI torch-", "download.pytorch.org/")) for source in facts.provenance.values()
    )
    findings = compare(load_catalog(), facts)
    assert [f.fact for f in findings if f.status == "DIFFERS"] == []
    assert sum(f.status == "explained" for f in findings) == explained
    assert len(findings) == compared


def test_a_wrong_arch_list_is_an_unexplained_difference() -> None:
    text = CATALOG_TOML.read_text(encoding="utf-8")
    wrong = text.replace(
        'default_arch_list = "5.0;6.0;7.0;7.5;8.0;8.6;9.0"\ntoolkit = "12.4.1"',
        'default_arch_list = "8.0;9.0"\ntoolkit = "12.4.1"',
    )
    assert wrong != text
    facts = read_facts_toml(FIXTURES / "torch-2.5" / FACTS_FILE)
    differs = [f.fact for f in compare(catalog_from_text(wrong), facts) if f.status == "DIFFERS"]
    assert differs == ["cuda.12.4.arch_list"]


def test_verify_command_reports_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalog", "verify", "--upstream", str(FIXTURES / "torch-2.5")]) == 0
    out = capsys.readouterr().out
    assert "torch 2.5: 0 unexplained difference(s), 5 explained" in out
    assert "pytorch/builder@release/2.5 (aec5fb5de2380a9084f4bb430eec4e576066a17c):manywheel/build_cuda.sh" in out


def test_docs_page_is_generated_from_the_catalog() -> None:
    assert (ROOT / "docs" / "catalog.md").read_text(encoding="utf-8") == catalog_docs.render(load_catalog())


# --- readers of the real files, on snippets in upstream's shapes (written for these tests) ---------
SHELL = """
export TORCH_NVCC_FLAGS="-Xfatbin -compress-all"
export USE_STATIC_NCCL=1
export USE_FEATURE=${USE_FEATURE:-1} # default
ARCHS="7.0;8.0"
TORCH_CUDA_ARCH_LIST="7.0;8.0"
case ${CUDA_VERSION} in
    12.[45])
        TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST};9.0"
        ;;
    13.0) TORCH_CUDA_ARCH_LIST="8.0;$([[ "$ARCH" == "aarch64" ]] && echo "11.0;" || echo "")12.0+PTX" ;;
esac
if [[ $CUDA_VERSION == 12* || $CUDA_VERSION == 13* ]]; then
    TORCH_NVCC_FLAGS="-Xfatbin -compress-all --threads 2"
    if [[ -z "$PYTORCH_EXTRA_INSTALL_REQUIREMENTS" ]]; then
        export BUNDLED=1
    else
        export USE_STATIC_NCCL=0
        export TORCH_NVCC_FLAGS="$TORCH_NVCC_FLAGS"
    fi
elif [[ $CUDA_VERSION == "11.8" ]]; then
    export ELEVEN=1
else
    exit 1
fi
if [[ "$SOMETHING_UNKNOWN" == "x" ]]; then
    export GUESSED=1
fi
"""


def test_shell_reader_follows_branches_case_arms_and_defaults() -> None:
    env = upstream.cuda_exports(SHELL, "12.4")
    assert env["TORCH_CUDA_ARCH_LIST"] == "7.0;8.0;9.0"
    assert env["USE_STATIC_NCCL"] == "0" and env["USE_FEATURE"] == "1"
    assert env["TORCH_NVCC_FLAGS"] == "-Xfatbin -compress-all --threads 2"
    assert "BUNDLED" not in env and "ELEVEN" not in env and "GUESSED" not in env
    assert upstream.arch_list(SHELL, "13.0") == "8.0;12.0+PTX"
    eleven = upstream.cuda_exports(SHELL, "11.8")
    assert eleven["ELEVEN"] == "1" and eleven["USE_STATIC_NCCL"] == "1" and eleven["TORCH_CUDA_ARCH_LIST"] == "7.0;8.0"


def test_matrix_reader_reads_both_layouts() -> None:
    torch_style = (
        'CUDA_ARCHES = ["12.6", "13.0"]\nFULL_PYTHON_VERSIONS = ["3.10", "3.11"]\n'
        'PYTORCH_EXTRA_INSTALL_REQUIREMENTS = {\n    "13.0": (\n        "a==1; platform_system == \'Linux\' | "\n'
        '        "b==2"\n    ),\n    "xpu": "c==3",\n}\n'
    )
    matrix = upstream.read_matrix(torch_style)
    assert matrix.python == ("3.10", "3.11") and matrix.cuda == ("12.6", "13.0")
    assert matrix.requirements == {"13.0": ("a==1", "b==2")}
    infra_style = (
        'PYTHON_ARCHES_DICT = {"nightly": ["3.14"], "test": ["3.10", "3.14t"]}\nCUDA_ARCHES_DICT = {"test": ["13.0"]}\n'
    )
    assert upstream.read_matrix(infra_style) == upstream.Matrix(("3.10", "3.14t"), ("13.0",), {})


def test_wheel_readers() -> None:
    metadata = (
        "Name: torch\nRequires-Python: >=3.10\nRequires-Dist: filelock\n"
        'Requires-Dist: cuda-toolkit[cublas]==13.0.3; platform_system == "Linux"\n'
        'Requires-Dist: nvidia-nccl-cu13==2.30.7; platform_system == "Linux"\n'
        'Requires-Dist: nvidia-foo; extra == "foo"\n'
    )
    assert upstream.metadata_requirements(metadata) == (
        'cuda-toolkit[cublas]==13.0.3; platform_system == "Linux"',
        'nvidia-nccl-cu13==2.30.7; platform_system == "Linux"',
    )
    assert upstream.metadata_cuda(metadata) == "13.0"
    assert upstream.wheel_manylinux("Tag: cp312-cp312-manylinux_2_28_x86_64\n") == "2_28"
    flags = "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_120,code=sm_120 -gencode arch=compute_120,code=compute_120"
    assert upstream.gencode_arch_list(flags) == "8.0;12.0+PTX"
    clone = 'check_call(["git", "clone", "https://github.com/ARM-software/ComputeLibrary.git",\n  "-b",\n  "v24.04"])'
    assert upstream.acl_version(clone) == "v24.04"
    assert (
        upstream.openblas_version("git clone https://github.com/OpenMathLib/OpenBLAS.git -b v0.3.25 --depth 1")
        == "v0.3.25"
    )


def test_aarch64_build_vars_reader() -> None:
    text = (
        'build_vars = "MAX_JOBS=5 LINKER=-Wl,-z "\n'
        'build_vars += f"BUILD_TEST=0 PYTORCH_BUILD_VERSION={version} PYTORCH_BUILD_NUMBER=1 "\n'
        'build_vars += "USE_MKLDNN=ON ACL_ROOT_DIR=/acl "\n'
        'check_call(["scons", "Werror=1", "neon=1"])\n'
        'if cuda:\n    build_vars += "BLAS=NVPL "\nelse:\n    build_vars += "BLAS=OpenBLAS "\n'
    )
    assert upstream.aarch64_build_vars(text) == {
        "MAX_JOBS": "5",
        "LINKER": "-Wl,-z",
        "BUILD_TEST": "0",
        "PYTORCH_BUILD_NUMBER": "1",
        "USE_MKLDNN": "ON",
        "ACL_ROOT_DIR": "/acl",
        "BLAS": "OpenBLAS",
    }


def test_torch_config_reader() -> None:
    shown = (
        "PyTorch built with:\n  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, TORCH_VERSION=2.13.0, USE_CUDA=0, "
        "USE_CUDNN=OFF, USE_MKLDNN=ON, USE_MPI=OFF, USE_OPENMP=ON, \n_GLIBCXX_USE_CXX11_ABI=True\n"
    )
    env, abi = upstream.torch_config(shown)
    assert env == {"BLAS": "MKL", "USE_CUDA": "0", "USE_MKLDNN": "ON", "USE_MPI": "OFF", "USE_OPENMP": "ON"}
    assert abi is True
