"""What a CUDA cell's compiled files hold, read without a toolkit (wfbuild.cuda.fatbin), the rule that decides whether
it serves the request (wfbuild.cuda.archrule) and the cell's verdict (wfbuild.cuda.devicecode).

The objects under tests/fixtures/device_code/ were compiled by the locked nvcc 13.0 (its README says how, and
what cuobjdump lists for them); tests/buildspecs/test_device_code_cuobjdump.py compares the reader with
cuobjdump on freshly compiled objects.
"""

from __future__ import annotations

import json
import struct
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from wfbuild.cuda import devicecode, fatbin
from wfbuild.cuda.archrule import Code, missing, parse_arch_list, runs_on

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "device_code"
CELL = "torch2.14.1-cp311-cuda13.0-x86_64"


def names(entries: list[fatbin.Entry] | None) -> list[str]:
    assert entries is not None
    return sorted({e.code.name for e in entries})


def test_the_reader_finds_each_sass_arch_and_ptx_target_in_a_shared_library() -> None:
    entries = fatbin.read_path(FIXTURES / "libmulti.so")
    assert names(entries) == ["compute_90", "sm_100f", "sm_80", "sm_90a"]
    assert entries is not None and len(entries) == 7  # nvcc wrote two containers of SASS (cuobjdump: 6 ELF)
    (ptx,) = [e for e in entries if e.code.kind == "ptx"]
    assert ptx.isa == "9.0" and ptx.compressed  # CUDA 13.0 writes PTX ISA 9.0, zstd-compressed: headers suffice
    assert {e.code.variant for e in entries} == {"", "a", "f"}


def test_a_device_linked_library_holds_only_what_its_link_kept() -> None:
    # -rdc: the relocatable copies (sm_80 and compute_90 per object) sit in __nv_relfatbin, never loaded; the
    # device-linked image in .nv_fatbin holds sm_80 alone, which is what runs (cuobjdump lists the same).
    assert names(fatbin.read_path(FIXTURES / "librdc.so")) == ["sm_80"]


def test_standalone_fatbinaries_and_ptx_files_are_read_too() -> None:
    assert names(fatbin.read_path(FIXTURES / "kernel.fatbin")) == ["compute_120", "sm_86"]
    (ptx,) = fatbin.read_path(FIXTURES / "kernel.ptx") or []
    assert (ptx.code.name, ptx.isa) == ("compute_90", "9.0")


def test_host_code_holds_none_and_other_files_are_not_compiled_code(tmp_path: Path) -> None:
    assert fatbin.read_path(Path(sys.executable).resolve()) == []  # an ELF without .nv_fatbin
    text = tmp_path / "module.py"
    text.write_text("print('hello')\n")
    assert fatbin.read_path(text) is None


def test_garbage_around_and_inside_a_fatbinary_is_skipped() -> None:
    good = (FIXTURES / "kernel.fatbin").read_bytes()
    fake = fatbin.MAGIC_BYTES + struct.pack("<HHQ", 1, 16, 1 << 40)  # a magic whose size runs past the end
    blob = b"\0" * 13 + fake + b"junk" + good + b"\0" * 7 + good
    assert [e.code.name for e in fatbin.scan(blob, 0, len(blob))] == ["sm_86", "compute_120"] * 2
    cut = good[: len(good) - 9]
    assert fatbin.scan(cut, 0, len(cut)) == []  # a truncated container is never half-read
    truncated_elf = (FIXTURES / "libmulti.so").read_bytes()[:200]
    assert fatbin.read(truncated_elf, "lib.so") in (None, [])


@pytest.mark.parametrize(
    ("arch_list", "codes", "absent"),
    [
        ("9.0", ["sm_90"], []),
        ("9.0", ["sm_80"], ["9.0"]),  # SASS never crosses a major version
        ("8.6", ["sm_80"], []),  # ... but runs on a later minor: counted (NVIDIA's binary compatibility)
        ("8.0", ["sm_86"], ["8.0"]),
        ("9.0", ["compute_80"], []),  # PTX is JIT-compiled for any later GPU
        ("8.0", ["compute_90"], ["8.0"]),
        ("9.0", ["compute_90a"], []),  # arch-specific code runs on its own arch ...
        ("10.0", ["compute_90a", "sm_90a"], ["10.0"]),  # ... and nowhere else
        ("10.3", ["sm_100a"], ["10.3"]),
        ("10.3", ["sm_100f"], []),  # family-specific: within its family
        ("12.0", ["sm_100f", "compute_100f"], ["12.0"]),
        ("9.0a", ["sm_90"], []),  # a 9.0 GPU runs it (without the 'a' features)
        ("9.0+PTX", ["sm_90"], ["9.0+PTX"]),  # "+PTX" asks for PTX every later GPU can JIT
        ("9.0+PTX", ["sm_90", "compute_80"], []),
        ("9.0a+PTX", ["sm_90a", "compute_90a"], ["9.0a+PTX"]),  # arch-specific PTX is no forward PTX
        ("8.0;9.0;10.0", ["sm_80", "compute_90"], []),
        ("8.0;9.0", [], ["8.0", "9.0"]),
        ("", ["sm_80"], []),
    ],
)
def test_a_requested_arch_needs_its_sass_or_ptx_the_driver_can_jit(
    arch_list: str, codes: list[str], absent: list[str]
) -> None:
    assert [str(w) for w in missing(arch_list, [Code.parse(c) for c in codes])] == absent


# Seen on an NVIDIA H100 (compute capability 9.0, driver 580.159.04), 2026-11-27: a one-kernel program built
# by nvcc 13.0.88 with one -gencode each, launched there; "no kernel image is available for execution on the
# device" for the ones that did not run (the session's report holds the commands and the output).
RAN_ON_H100 = {
    "sm_80": False, "sm_86": False, "compute_80": True, "sm_90": True, "sm_90a": True, "compute_90a": True,
    "compute_100": False, "sm_100f": False, "compute_100f": False, "sm_120": False,
}  # fmt: skip


@pytest.mark.parametrize(("code", "ran"), sorted(RAN_ON_H100.items()))
def test_the_rule_says_what_an_h100_ran(code: str, ran: bool) -> None:
    assert runs_on(Code.parse(code), (9, 0)) is ran


def test_arch_names_parse_both_ways() -> None:
    assert [Code.parse(n).name for n in ("sm_90a", "compute_100f", "sm_120")] == ["sm_90a", "compute_100f", "sm_120"]
    assert (Code.parse("sm_120").major, Code.parse("sm_120").minor) == (12, 0)
    with pytest.raises(ValueError, match="'sm90'"):
        Code.parse("sm90")
    with pytest.raises(ValueError, match="'Hopper'"):
        parse_arch_list("8.0;Hopper")


def _wheel(folder: Path, name: str, members: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, body in members.items():
            zf.writestr(member, body)
    return path


def _run(tmp_path: Path, wheel_dir: Path, arch_list: str, src: Path | None = None) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "meta" / "devicecode" / f"{CELL}.json"
    argv = ["--in-dir", str(wheel_dir), "--cell", CELL, "--cuda", "13.0", "--arch-list", arch_list, "--out", str(out)]
    argv += ["--src", str(src)] if src else []
    code = devicecode.main(argv)
    return code, json.loads(out.read_text())


def test_a_cell_holding_code_for_every_requested_arch_passes_and_records_each_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    so = (FIXTURES / "libmulti.so").read_bytes()
    wheel = _wheel(tmp_path / "raw", "wf_x-0.1.0-cp311-cp311-linux_x86_64.whl", {"wf_x/_C.so": so, "wf_x/a.py": b""})
    code, record = _run(tmp_path, wheel.parent, "8.0;8.6;9.0;10.3;12.0")
    assert code == 0, capsys.readouterr().err
    assert record["status"] == "ok" and record["missing"] == []
    assert record["files"]["wf_x/_C.so"] == {
        "sass": ["sm_100f", "sm_80", "sm_90a"],
        "ptx": ["compute_90"],
        "ptx_isa": ["9.0"],
        "entries": 7,
    }
    assert record["serves"]["8.6"] == ["sm_80"] and record["serves"]["12.0"] == ["compute_90"]
    assert "holds code for every requested arch" in capsys.readouterr().out


def test_a_host_only_build_is_refused_with_the_packages_own_switch_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    host = Path(sys.executable).resolve().read_bytes()
    wheel = _wheel(tmp_path / "raw", "wf_x-0.1.0-cp311-cp311-linux_x86_64.whl", {"wf_x/_C.so": host})
    src = tmp_path / "src"
    src.mkdir()
    (src / "setup.py").write_text(
        'import os\nBUILD = os.getenv("MYPKG_FORCE_CUDA", "0") == "1"\nDBG = os.environ.get("MYPKG_DEBUG")\n'
        'if "MYPKG_WITH_KERNELS" in os.environ: pass\nFORCE = os.environ.get("FORCE_CUDA")\n'
    )
    monkeypatch.setenv("FORCE_CUDA", "1")
    code, record = _run(tmp_path, wheel.parent, "9.0", src)
    err = capsys.readouterr().err
    assert code == 1 and record["status"] == "refused" and record["files"]["wf_x/_C.so"]["sass"] == []
    lines = [ln for ln in err.splitlines() if ln.startswith(devicecode.VERDICT)]
    assert len(lines) == 3, err
    assert f"cell {CELL} (CUDA 13.0, arch list 9.0): no compiled file holds device code" in lines[0]
    assert "_C.so: host code only" in lines[1]
    # the switches its setup.py reads (not a debug flag, not what the farm sets itself), and the usual examples
    assert "its build files read MYPKG_FORCE_CUDA, MYPKG_WITH_KERNELS)" in lines[2]
    assert "FORCE_CUDA_EXTENSION=1" in lines[2] and "build_env" in lines[2]


def test_a_pure_python_wheel_in_a_cuda_cell_is_refused_as_compiling_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = _wheel(tmp_path / "raw", "tla-0.1.0-py3-none-any.whl", {"tla/__init__.py": b"x = 1\n"})
    code, record = _run(tmp_path, wheel.parent, "9.0")
    err = capsys.readouterr().err
    assert code == 1 and record["files"] == {}
    assert "nothing was compiled: tla-0.1.0-py3-none-any.whl holds no compiled file (a pure-Python wheel)" in err
    assert "TLA_BUILD_LEGACY_CUDA=1" in err


def test_a_build_for_other_architectures_is_refused_naming_the_missing_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(devicecode, "IN_MEMORY", 1024)  # the large-member path: extracted, then mmap'd
    so = (FIXTURES / "librdc.so").read_bytes()
    wheel = _wheel(tmp_path / "raw", "wf_x-0.1.0-cp311-cp311-linux_x86_64.whl", {"wf_x/_C.so": so})
    src = tmp_path / "src"
    src.mkdir()
    (src / "setup.py").write_text('nvcc = ["-gencode", "arch=compute_80,code=sm_80"]\n')
    code, record = _run(tmp_path, wheel.parent, "8.0;9.0", src)
    err = capsys.readouterr().err
    assert code == 1 and record["missing"] == ["9.0"] and record["serves"]["8.0"] == ["sm_80"]
    assert "no code for 9.0: neither its SASS nor PTX the driver can JIT for it" in err
    assert "_C.so: SASS sm_80" in err
    assert "sets its own architectures instead of TORCH_CUDA_ARCH_LIST (arch=compute_80,code=sm_80" in err
