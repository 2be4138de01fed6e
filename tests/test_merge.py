"""The merge library and its loader stub, on synthetic cell wheels (real builds: tests/workflow/test_merged.py)."""

from __future__ import annotations

import sys
import types
import zipfile
from pathlib import Path

import pytest

from wheelfoundry.publishing.loader import render_stub
from wheelfoundry.publishing.merge import Build, MergeConflict, merge, torch_requirement

SO = "ext/_C.cpython-311-x86_64-linux-gnu.so"
METADATA = (
    "Metadata-Version: 2.1\nName: my-ext\nVersion: {version}\nRequires-Python: >=3.9\n"
    "Requires-Dist: torch>=2.0\nRequires-Dist: numpy\nLicense: line one\n        line two\n\nThe description.\n"
)


def cell_wheel(folder: Path, label: str, plat: str = "manylinux_2_28_x86_64", **files: bytes) -> Path:
    version = f"1.0+{label}"
    path = folder / f"my_ext-{version}-cp311-cp311-{plat}.whl"
    folder.mkdir(parents=True, exist_ok=True)
    content = {
        "ext/__init__.py": b"from ext import _C\n",
        SO: f"ELF {label}".encode(),
        f"my_ext-{version}.dist-info/METADATA": METADATA.format(version=version).encode(),
        f"my_ext-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nTag: cp311-cp311-" + plat.encode() + b"\n",
        f"my_ext-{version}.dist-info/RECORD": b"",
        **{k.replace("__", "/"): v for k, v in files.items()},
    }
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in content.items():
            zf.writestr(name, data)
    return path


@pytest.mark.parametrize(
    ("versions", "expected"),
    [
        (["2.13.0"], "torch>=2.13,<2.14"),
        (["2.13.0", "2.14.1", "2.12.0"], "torch>=2.12,<2.15"),
        (["2.11.0", "2.14.1"], "torch>=2.11,<2.15,!=2.12.*,!=2.13.*"),
        (["1.13.1", "2.0.1"], "torch>=1.13,<2.1"),
    ],
)
def test_torch_requirement_covers_exactly_the_builds(versions: list[str], expected: str) -> None:
    assert torch_requirement(versions) == expected


def test_merge_relocates_builds_writes_stubs_and_rewrites_metadata(tmp_path: Path) -> None:
    a = cell_wheel(tmp_path / "a", "pt213cpu", "manylinux_2_28_x86_64", **{"my_ext.libs__libgomp.so.1": b"gomp"})
    b = cell_wheel(tmp_path / "b", "pt214cu130", "manylinux_2_34_x86_64")
    builds = [Build("torch2.13-cpu", "2.13.0", None, a), Build("torch2.14-cu130", "2.14.1", "13.0", b)]
    merged = merge(builds, tmp_path / "out")
    assert merged.filename == "my_ext-1.0-cp311-cp311-manylinux_2_34_x86_64.whl"  # the newest glibc any build needs
    with zipfile.ZipFile(merged.path) as zf:
        names = set(zf.namelist())
        assert zf.read("my_ext.wfbuilds/torch2.13-cpu/" + SO) == b"ELF pt213cpu"
        assert zf.read("my_ext.wfbuilds/torch2.14-cu130/" + SO) == b"ELF pt214cu130"
        assert zf.read("my_ext.wfbuilds/torch2.13-cpu/my_ext.libs/libgomp.so.1") == b"gomp"
        assert SO not in names and "ext/_C.py" in names and "ext/__init__.py" in names
        metadata = zf.read("my_ext-1.0.dist-info/METADATA").decode()
        record = zf.read("my_ext-1.0.dist-info/RECORD").decode()
        wheel = zf.read("my_ext-1.0.dist-info/WHEEL").decode()
    assert "Version: 1.0\n" in metadata and "torch>=2.0" not in metadata
    assert "Requires-Dist: numpy\n" in metadata and "Requires-Dist: torch>=2.13,<2.15\n" in metadata
    assert "License: line one\n        line two\n" in metadata and metadata.endswith("\n\nThe description.\n")
    assert "Tag: cp311-cp311-manylinux_2_34_x86_64" in wheel
    assert all(name in record for name in names - {"my_ext-1.0.dist-info/RECORD"})
    # Deterministic: the same cells give the same bytes (a re-run finds its wheel unchanged).
    again = merge(builds, tmp_path / "again")
    assert again.sha256 == merged.sha256
    assert merged.size <= merged.inputs_size + 2048


def test_python_files_that_differ_between_builds_are_refused(tmp_path: Path) -> None:
    a = cell_wheel(tmp_path / "a", "pt213cpu", **{"ext__version.py": b"torch = '2.13'\n"})
    b = cell_wheel(tmp_path / "b", "pt214cpu", **{"ext__version.py": b"torch = '2.14'\n"})
    builds = [Build("torch2.13-cpu", "2.13.0", None, a), Build("torch2.14-cpu", "2.14.1", None, b)]
    with pytest.raises(
        MergeConflict, match=r"ext/version\.py differs between builds torch2\.13-cpu and torch2\.14-cpu"
    ):
        merge(builds, tmp_path / "out")


def test_an_unrepaired_wheel_is_refused(tmp_path: Path) -> None:
    a = cell_wheel(tmp_path / "a", "pt213cpu", "linux_x86_64")
    with pytest.raises(MergeConflict, match="not a repaired manylinux wheel"):
        merge([Build("torch2.13-cpu", "2.13.0", None, a)], tmp_path / "out")


BUILDS = [
    ("torch2.13-cpu", "2.13", None, "p.wfbuilds/torch2.13-cpu/p/_C.so"),
    ("torch2.14-cpu", "2.14", None, "p.wfbuilds/torch2.14-cpu/p/_C.so"),
    ("torch2.14-cu126", "2.14", "12.6", "p.wfbuilds/torch2.14-cu126/p/_C.so"),
    ("torch2.14-cu130", "2.14", "13.0", "p.wfbuilds/torch2.14-cu130/p/_C.so"),
]


@pytest.mark.parametrize(
    ("torch_version", "cuda", "picked"),
    [
        ("2.13.0+cpu", None, "torch2.13-cpu"),
        ("2.14.1", "13.0", "torch2.14-cu130"),
        ("2.14.1+cu128", "12.8", "torch2.14-cu126"),  # CUDA minor version compatibility: 12.6 build on 12.8
        ("2.14.1+cu132", "13.2", "torch2.14-cu130"),
        ("2.13.0+cu130", "13.0", "torch2.13-cpu"),  # no CUDA build for 2.13: its CPU build serves
        ("2.14.0a0+git123", None, "torch2.14-cpu"),
        ("2.15.0", None, None),
        ("2.14.1+cu118", "11.8", "torch2.14-cpu"),
    ],
)
def test_the_stub_picks_the_build_for_the_installed_torch(
    torch_version: str, cuda: str | None, picked: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = types.ModuleType("torch")
    fake.__version__ = torch_version  # type: ignore[attr-defined]
    fake.version = types.SimpleNamespace(cuda=cuda)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", fake)
    source = render_stub("p._C", "my-ext", BUILDS).replace("\n_load()\n", "\n")
    namespace: dict[str, object] = {"__name__": "p._C", "__file__": "/site/p/_C.py"}
    exec(compile(source, "p/_C.py", "exec"), namespace)
    build = namespace["_pick"](torch_version, cuda)  # type: ignore[operator]
    assert (build[0] if build else None) == picked
    assert namespace["_ROOT"] == "/site"
    if picked is None:
        with pytest.raises(ImportError) as info:
            namespace["_load"]()  # type: ignore[operator]
        message = str(info.value)
        assert f"no build for torch {torch_version} (CUDA none)" in message
        assert "torch2.13-cpu, torch2.14-cpu, torch2.14-cu126, torch2.14-cu130" in message
