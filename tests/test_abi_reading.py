"""What a build is, read from its compiled files (issue 66 item 1), on real builds against the installed torch.

tests/fixtures/stable_ext is built twice per module with torch's BuildExtension (no_python_abi_suffix=True,
TORCH_TARGET_VERSION 2.10): as it is, on LibTorch's stable ABI only, and with WF_ABI_SLIP=1, which slips an
``at::`` call in. wfbuild.wheels.abi classifies them; wheelfoundry.publishing.merge, reading the same bytes, calls the
unsuffixed ``wf_stable/csrc.so`` an extension module (it defines ``PyInit_csrc``) and merges it, while a
plain shared library without ``PyInit_`` stays a library loaded by path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from tests.test_merge import METADATA
from wfbuild.wheels import abi, shims
from wheelfoundry.aws.merging import choose_layout
from wheelfoundry.publishing.elf import defined_symbols, is_plain_extension_module
from wheelfoundry.publishing.merge import Build, merge, path_loaded, plain_modules
from wheelfoundry_user import abi as abi_lines

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests/fixtures/stable_ext"
TORCH = Path(torch.__file__).parent
ENV = Path(sys.prefix)  # the env the package builds in: its torch's headers hold the shim versions
SO = "wf_stable/csrc.so"
DEMANGLED = shutil.which("c++filt") is not None


def _build(dest: Path, slip: bool) -> Path:
    """One wheel of the fixture, built from a copy (setuptools writes build/ into the tree)."""
    src = dest / "src"
    shutil.copytree(FIXTURE, src)
    env = {**os.environ, "WF_ABI_SLIP": "1" if slip else "0", "MAX_JOBS": "1"}
    argv = [sys.executable, "-m", "pip", "wheel", str(src), "--no-build-isolation", "--no-deps", "-q"]
    subprocess.run([*argv, "-w", str(dest / "wheels")], env=env, check=True, capture_output=True)
    (wheel,) = (dest / "wheels").glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{"stable": wheel, "slip": wheel}: both built at once (about 25 s each on a busy 2-core host)."""
    root = tmp_path_factory.mktemp("stable_ext")
    with ThreadPoolExecutor(2) as pool:
        built = {name: pool.submit(_build, root / name, name == "slip") for name in ("stable", "slip")}
        return {name: future.result() for name, future in built.items()}


def _read(wheel: Path, out: Path) -> dict[str, object]:
    argv = ["--in-dir", str(wheel.parent), "--cell", "c1", "--torch-version", torch.__version__]
    argv += ["--env-dir", str(ENV), "--src", str(FIXTURE), "--out", str(out)]
    assert abi.main(argv) == 0
    record: dict[str, object] = json.loads(out.read_text())
    return record


def test_the_installed_torch_headers_give_each_shim_its_release() -> None:
    assert not list(TORCH.rglob("shim_function_versions*"))  # not shipped in the wheel: the guards are read
    table = shims.versions(TORCH / "include")
    assert table["torch_call_dispatcher"] == "2.10" and table["torch_from_blob"] == "2.11"
    assert table["aoti_torch_dtype_float8_e8m0fnu"] == "2.12" and table["torch_exception_get_what"] == "2.13"
    assert table["aoti_torch_get_dtype"] is None  # declared outside any guard: older than the versioning


def test_a_cells_thin_env_finds_its_torch_headers_in_the_cached_env_it_layers(tmp_path: Path) -> None:
    # the abi stage is given the cell's env: a thin venv whose _wf_base.pth adds the cached env's site-packages
    headers = tmp_path / "cached/lib/python3.11/site-packages/torch/include"
    headers.mkdir(parents=True)
    site = tmp_path / "thin/lib/python3.11/site-packages"
    site.mkdir(parents=True)
    assert shims.include_dir(tmp_path / "thin") is None
    line = f"import site; site.addsitedir({json.dumps(str(headers.parents[1]))})\n"
    (site / "_wf_base.pth").write_text(line)
    assert shims.include_dir(tmp_path / "thin") == headers
    assert shims.include_dir(tmp_path / "cached") == headers


def test_guards_nest_and_an_else_branch_is_the_older_torch() -> None:
    text = (
        "#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_11_0\nAOTI_TORCH_EXPORT AOTITorchError\ntorch_new(int x);\n"
        "#ifdef USE_CUDA\nAOTI_TORCH_EXPORT int32_t torch_cuda_new();\n#endif\n"
        "#else\nAOTI_TORCH_EXPORT int32_t aoti_torch_old();\n#endif // TORCH_FEATURE_VERSION\n"
        "AOTI_TORCH_EXPORT void aoti_torch_plain();\n"
    )
    assert shims.header_versions(text) == {
        "torch_new": "2.11",
        "torch_cuda_new": "2.11",
        "aoti_torch_old": None,
        "aoti_torch_plain": None,
    }


def test_a_stable_abi_extension_is_stable_with_its_floor(wheels: dict[str, Path], tmp_path: Path) -> None:
    record = _read(wheels["stable"], tmp_path / "abi.json")
    assert record["stable"] is True and record["floor"] == "2.10" and record["target"] == "2.10"
    assert record["target_from"] == "TORCH_TARGET_VERSION in setup.py"
    file = record["files"][SO]  # type: ignore[index]
    assert file["stable"] and file["floor"] == "2.10" and file["extension_module"] == "csrc"
    assert file["floor_symbols"] == ["torch_call_dispatcher", "torch_library_impl"] and file["torch_symbols"] == []
    assert file["unknown_shims"] == [] and file["shims"] > 10
    line = abi_lines.job_line("job-1", {"c1": record})
    assert line == "job-1: stable, floor torch 2.10 (torch_call_dispatcher, torch_library_impl)"


def test_the_same_with_an_at_call_is_per_torch_naming_the_symbol(wheels: dict[str, Path], tmp_path: Path) -> None:
    record = _read(wheels["slip"], tmp_path / "abi.json")
    file = record["files"][SO]  # type: ignore[index]
    assert record["stable"] is False and record["floor"] is None
    assert not file["stable"] and file["floor"] is None and file["torch_symbols_count"] == 2
    named = "at::get_num_threads()" if DEMANGLED else "_ZN2at15get_num_threadsEv"
    assert named in file["torch_symbols"]
    line = abi_lines.job_line("job-1", {"c1": record, "c2": json.loads((tmp_path / "abi.json").read_text())})
    assert line is not None and line.startswith(f"job-1: per-torch: csrc.so imports {named}")
    assert line.endswith("(2 of 2 cell(s))")
    assert abi_lines.lines({"job-1": {"abi": {"c1": record}}})[1].startswith("  job-1: per-torch: csrc.so")


def _required(wheel: Path, oldest: str, out: Path) -> int:
    argv = ["--in-dir", str(wheel.parent), "--cell", "c1", "--torch-version", torch.__version__]
    return abi.main(
        [*argv, "--env-dir", str(ENV), "--src", str(FIXTURE), "--out", str(out), "--require-stable", oldest]
    )


def test_abi_stable_refuses_a_per_torch_file_naming_the_symbol(
    wheels: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _required(wheels["stable"], "2.10", tmp_path / "ok.json") == 0
    assert "REFUSED" not in capsys.readouterr().err
    assert _required(wheels["slip"], "2.10", tmp_path / "slip.json") == 1
    (line,) = capsys.readouterr().err.splitlines()
    named = "at::get_num_threads()" if DEMANGLED else "_ZN2at15get_num_threadsEv"
    assert line.startswith(f"ABI REFUSED: cell c1 (the request's abi: stable): {SO} is per-torch: it imports ")
    assert named in json.loads((tmp_path / "slip.json").read_text())["files"][SO]["torch_symbols"]
    assert line.endswith("(2 such symbols)")


def test_abi_stable_refuses_a_floor_above_the_oldest_torch_naming_the_shim(
    wheels: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _required(wheels["stable"], "2.9", tmp_path / "old.json") == 1  # its target is 2.10
    wanted = f"{SO} needs torch >= 2.10 (shim torch_call_dispatcher, torch_library_impl), above the oldest torch"
    assert (
        capsys.readouterr().err.strip() == f"ABI REFUSED: cell c1 (the request's abi: stable): {wanted} in range, 2.9"
    )
    table = shims.versions(TORCH / "include")  # torch_from_blob came with 2.11
    file = abi.classify({"torch_from_blob", "torch_call_dispatcher"}, set(), table, "2.10")
    record = {"target": "2.10", "target_from": "TORCH_TARGET_VERSION in setup.py", "shim_table": len(table)}
    record["files"] = {"ext.so": file}
    assert abi.refusals(record, "2.10") == [
        "ext.so needs torch >= 2.11 (shim torch_from_blob), above the oldest torch in range, 2.10"
    ]
    assert abi.refusals(record, "2.11") == []
    # no TORCH_TARGET_VERSION: the cell's own torch is the floor, and the refusal says so and how to mend it
    own = abi.classify({"torch_call_dispatcher"}, set(), table, "2.12")
    implicit = {"target": "2.12", "target_from": "the cell's torch 2.12.0 (no TORCH_TARGET_VERSION found)"}
    implicit |= {"shim_table": len(table), "files": {"ext.so": own}}
    (why,) = abi.refusals(implicit, "2.10")
    assert "needs torch >= 2.12 (the cell's torch 2.12.0 (no TORCH_TARGET_VERSION found))" in why
    assert why.endswith("build with -DTORCH_TARGET_VERSION=0x020a000000000000 (torch 2.10)")
    # a floor that cannot be checked is no pass: headers not read, or a shim they do not declare
    assert "floor is unknown" in abi.refusals({**record, "shim_table": 0}, "2.11")[0]
    odd = abi.classify({"torch_from_the_future"}, set(), table, "2.10")
    assert abi.refusals({**record, "files": {"ext.so": odd}}, "2.11") == [
        "ext.so calls torch_from_the_future, which the build torch's headers do not declare: its floor is unknown"
    ]


def test_the_target_comes_from_the_flags_else_the_cells_torch(tmp_path: Path) -> None:
    flags = {"CXXFLAGS": "-O2 -DTORCH_TARGET_VERSION=0x020b000000000000"}
    assert abi.target_of("2.13.0", None, flags) == ("2.11", "TORCH_TARGET_VERSION in $CXXFLAGS")
    assert abi.target_of("2.13.0+cu130", tmp_path, {})[0] == "2.13"
    record = abi.classify({"torch_from_blob", "aoti_torch_get_dtype"}, set(), {"torch_from_blob": "2.11"}, "2.10")
    assert record["floor"] == "2.11" and record["floor_symbols"] == ["torch_from_blob"]  # a shim above the target


def test_libtorch_cxx_imports_are_told_from_the_stable_ones() -> None:
    for name in (
        "_ZN2at15get_num_threadsEv",
        "_ZNK2at10TensorBase4sizeEl",
        "_ZN3c106detail14torchCheckFailEPKcS2_jS2_",
    ):
        assert abi.torch_bound(name), name
    for name in ("_ZTIN3c105ErrorE", "_ZNSt6vectorIN2at6TensorESaIS1_EE9push_backEOS1_", "THPVariableClass"):
        assert abi.torch_bound(name), name  # typeinfo, std:: over an at:: type, libtorch_python's globals
    for name in ("_ZN5torch6stable6detail4waitEv", "_ZN5torch10headeronly5dummyEv", "_ZNSo6sentryD1Ev", "_Z3foov"):
        assert not abi.torch_bound(name), name
    assert not abi.torch_bound("torch_call_dispatcher") and not abi.torch_bound("PyModule_Create2")


def _plain_library(tmp_path: Path) -> bytes:
    """A shared library with no PyInit_ (what PyG loads by path), compiled from C."""
    (tmp_path / "lib.c").write_text("int wf_scale(int x) { return 2 * x; }\n")
    out = tmp_path / "_version_cpu.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(tmp_path / "lib.c")], check=True)
    return out.read_bytes()


def test_pyinit_decides_what_a_file_is_for_the_layout(wheels: dict[str, Path], tmp_path: Path) -> None:
    with zipfile.ZipFile(wheels["stable"]) as zf:
        module = zf.read(SO)
    library = _plain_library(tmp_path)
    assert "PyInit_csrc" in defined_symbols(module) and not [s for s in defined_symbols(library) if "PyInit" in s]
    assert is_plain_extension_module(SO, module) and not is_plain_extension_module("wf_stable/other.so", module)
    assert not is_plain_extension_module("wf_stable/_version_cpu.so", library)
    assert not is_plain_extension_module(SO, b"ELF by path")  # not an ELF file: nothing vouches for it
    files = [SO, "wf_stable/__init__.py"]
    plain = plain_modules([{SO: module}])
    assert plain == {SO} and path_loaded(files, plain) == []
    assert choose_layout("auto", files, plain)[0] == "merged"
    assert choose_layout("auto", files)[0] == "per-cell"  # by its name alone, as before
    pyg = ["wf_stable/_version_cpu.so"]
    assert plain_modules([{pyg[0]: library}]) == frozenset() and choose_layout("auto", pyg)[0] == "per-cell"
    assert plain_modules([{SO: module}, {SO: library}]) == frozenset()  # one build's copy loaded by path


def _cell(folder: Path, label: str, module: bytes) -> Path:
    version = f"0.1.0+{label}"
    path = folder / f"wf_stable-{version}-cp311-cp311-manylinux_2_28_x86_64.whl"
    folder.mkdir(parents=True)
    info = f"wf_stable-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(SO, module)
        zf.writestr("wf_stable/__init__.py", (FIXTURE / "wf_stable/__init__.py").read_text())
        zf.writestr(f"{info}/METADATA", METADATA.format(version=version).replace("my-ext", "wf-stable"))
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nTag: cp311-cp311-manylinux_2_28_x86_64\n")
        zf.writestr(f"{info}/RECORD", "")
    return path


def test_an_unsuffixed_extension_module_merges_and_imports(wheels: dict[str, Path], tmp_path: Path) -> None:
    with zipfile.ZipFile(wheels["stable"]) as zf:
        module = zf.read(SO)
    minor = ".".join(torch.__version__.split(".")[:2])
    builds = [
        Build(f"torch{minor}-cpu", torch.__version__.split("+")[0], None, _cell(tmp_path / "a", "cpu", module)),
        Build("torch2.99-cpu", "2.99.0", None, _cell(tmp_path / "b", "other", module)),
    ]
    merged = merge(builds, tmp_path / "out")
    with zipfile.ZipFile(merged.path) as zf:
        names = set(zf.namelist())
        zf.extractall(tmp_path / "site")
    assert "wf_stable/csrc.py" in names and SO not in names  # the loader stub in the module's place
    assert f"wf_stable.wfbuilds/torch{minor}-cpu/{SO}" in names
    code = "import torch, wf_stable; print(torch.ops.wf_stable.copy(torch.ones(2)).tolist())"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[1.0, 1.0]"
