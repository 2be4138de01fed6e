"""install_cuda.py, the toolkit assembly the builder image and host mode share, against fake downloads.

The lock, the archives and the wheels are made here (a redist archive of the real layout, wheels with
nvidia/<part>/ payloads); the archives come over file:// (WF_CUDA_REDIST_URL), the wheels from a
local find-links folder through the real `pip download --require-hashes`. Matching digests assemble a
CUDA_HOME; one wrong byte anywhere installs nothing.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.helpers import ROOT
from wfbuild.cuda import toolkit

install_cuda = toolkit.installer(ROOT / "buildspecs")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _archive(files: dict[str, bytes], top: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
        for name, body in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mode = len(body), 0o755 if name.startswith("bin/") else 0o644
            tar.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


def _wheel(name: str, version: str, files: dict[str, bytes]) -> tuple[str, bytes]:
    dist = f"{name.replace('-', '_')}-{version}"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        for path, body in files.items():
            wheel.writestr(path, body)
        wheel.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wheel.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{dist}.dist-info/RECORD", "")
    return f"{dist}-py3-none-any.whl", buffer.getvalue()


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """A lock for a made-up CUDA 9.9 and the files it names, served locally."""
    redist, wheels, locks = tmp_path / "redist", tmp_path / "wheels", tmp_path / "locks"
    for folder in (redist, wheels, locks):
        folder.mkdir()
    archive = _archive(
        {
            "bin/nvcc": b"#!/bin/sh\necho 'Cuda compilation tools, release 9.9, V9.9.1'\n",
            "include/cuda_runtime.h": b"//\n",
        },
        "cuda_nvcc-linux-x86_64-9.9.1-archive",
    )
    rel = "cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-9.9.1-archive.tar.xz"
    (redist / rel).parent.mkdir(parents=True)
    (redist / rel).write_bytes(archive)
    compiler = _wheel("nvidia-fake-nvvm", "9.9.1", {"nvidia/cu99/nvvm/bin/cicc": b"cicc", "nvidia/__init__.py": b""})
    library = _wheel(
        "nvidia-fakeblas",
        "9.9.2",
        {"nvidia/fakeblas/include/fakeblas.h": b"//", "nvidia/fakeblas/lib/libfakeblas.so.9": b"\x7fELF"},
    )
    for file, body in (compiler, library):
        (wheels / file).write_bytes(body)
    lock = {
        "cuda": "9.9",
        "platform": "x86_64",
        "release": "9.9.1",
        "redist": {
            "url": "https://example.invalid/redist/",
            "manifest": "redistrib_9.9.1.json",
            "manifest_sha256": "0" * 64,
            "pinned_by": ["example/repo@0000000:manifests.bzl"],
        },
        "archive": [
            {"component": "cuda_nvcc", "version": "9.9.1", "path": rel, "sha256": _sha(archive), "size": len(archive)}
        ],
        "wheel": [
            {
                "name": "nvidia-fake-nvvm",
                "version": "9.9.1",
                "part": "compiler",
                "file": compiler[0],
                "sha256": _sha(compiler[1]),
                "url": "",
            },
            {
                "name": "nvidia-fakeblas",
                "version": "9.9.2",
                "part": "library",
                "file": library[0],
                "sha256": _sha(library[1]),
                "url": "",
            },
        ],
        "requirements": {"nvidia-fakeblas==9.9.2": ["nvidia-fakeblas==9.9.2"]},
    }
    write_lock(locks, lock)
    monkeypatch.setenv("WF_CUDA_REDIST_URL", redist.as_uri())
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.delenv("PIP_CONSTRAINT", raising=False)
    return {"locks": locks, "lock": lock, "redist": redist, "wheels": wheels, "rel": rel}


def write_lock(locks: Path, lock: dict[str, object]) -> None:
    import tools.lock_cuda as lock_cuda

    (locks / "cuda-9.9-x86_64.toml").write_text(lock_cuda.render({"unavailable": {}, **lock}), encoding="utf-8")


def test_matching_downloads_assemble_a_cuda_home(mirror: dict[str, object], tmp_path: Path) -> None:
    prefix = tmp_path / "cuda-9.9"
    record = install_cuda.install("9.9", "x86_64", prefix, ["nvidia-fakeblas==9.9.2", "triton==9.0"], mirror["locks"])
    assert record["wheels"] == ["nvidia-fake-nvvm==9.9.1", "nvidia-fakeblas==9.9.2"]
    assert os.access(prefix / "bin" / "nvcc", os.X_OK)
    assert (prefix / "nvvm" / "bin" / "cicc").read_bytes() == b"cicc"
    assert (prefix / "include" / "fakeblas.h").is_file() and (prefix / "include" / "cuda_runtime.h").is_file()
    assert os.readlink(prefix / "lib64" / "libfakeblas.so") == "libfakeblas.so.9"  # what -lfakeblas needs
    assert (prefix / "lib").resolve() == (prefix / "lib64").resolve()
    assert (prefix / "targets" / "x86_64-linux" / "include" / "fakeblas.h").is_file()  # nvcc.profile's include dir
    assert json.loads((prefix / "wf-toolkit.json").read_text())["release"] == "9.9.1"
    assert not [p for p in prefix.parent.iterdir() if p.name.startswith(".cuda-")], "staging left behind"


def test_without_the_library_requirement_only_the_compiler_is_installed(
    mirror: dict[str, object], tmp_path: Path
) -> None:
    record = install_cuda.install("9.9", "x86_64", tmp_path / "cuda", [], mirror["locks"])
    assert record["wheels"] == ["nvidia-fake-nvvm==9.9.1"]
    assert not (tmp_path / "cuda" / "include" / "fakeblas.h").exists()


def test_an_archive_with_other_bytes_installs_nothing(mirror: dict[str, object], tmp_path: Path) -> None:
    path = mirror["redist"] / mirror["rel"]  # type: ignore[operator]
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(install_cuda.LockError, match="does not match the lock"):
        install_cuda.install("9.9", "x86_64", tmp_path / "cuda", [], mirror["locks"])
    assert not (tmp_path / "cuda").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".cuda-")]


def test_a_wheel_with_other_bytes_is_refused_by_pip(mirror: dict[str, object], tmp_path: Path) -> None:
    wheel = mirror["wheels"] / mirror["lock"]["wheel"][1]["file"]  # type: ignore[index,operator]
    with zipfile.ZipFile(wheel, "a") as zf:
        zf.writestr("nvidia/fakeblas/include/planted.h", b"#error")
    with pytest.raises(install_cuda.subprocess.CalledProcessError):
        install_cuda.install("9.9", "x86_64", tmp_path / "cuda", ["nvidia-fakeblas==9.9.2"], mirror["locks"])
    assert not (tmp_path / "cuda").exists()


def test_an_unlocked_requirement_fails_before_any_download(mirror: dict[str, object], tmp_path: Path) -> None:
    (mirror["redist"] / mirror["rel"]).unlink()  # type: ignore[operator]  # a download would fail differently
    with pytest.raises(
        install_cuda.LockError, match=r"holds no wheels for nvidia-fakeblas==9\.9\.3.*lock_cuda\.py wheels 9\.9"
    ):
        install_cuda.install("9.9", "x86_64", tmp_path / "cuda", ["nvidia-fakeblas==9.9.3"], mirror["locks"])


def test_a_cuda_version_without_a_lock_names_the_locked_ones(mirror: dict[str, object], tmp_path: Path) -> None:
    with pytest.raises(install_cuda.LockError, match=r"no CUDA 9\.8 lock for x86_64 .*locked: 9\.9-x86_64"):
        install_cuda.install("9.8", "x86_64", tmp_path / "cuda", [], mirror["locks"])


def test_plain_http_is_refused(mirror: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WF_CUDA_REDIST_URL", "http://example.invalid/redist")
    with pytest.raises(install_cuda.LockError, match="neither https nor file"):
        install_cuda.install("9.9", "x86_64", tmp_path / "cuda", [], mirror["locks"])


def test_host_mode_installs_once_per_cache_and_points_the_stages_at_it(
    mirror: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(install_cuda, "LOCKS", mirror["locks"])
    monkeypatch.setattr(toolkit, "installer", lambda bundle: install_cuda)
    first = toolkit.ensure(ROOT / "buildspecs", "9.9", "x86_64", ["nvidia-fakeblas==9.9.2"], tmp_path / "cache")
    (mirror["redist"] / mirror["rel"]).unlink()  # type: ignore[operator]  # a second install would fail
    again = toolkit.ensure(ROOT / "buildspecs", "9.9", "x86_64", ["nvidia-fakeblas==9.9.2"], tmp_path / "cache")
    assert again == first
    env = toolkit.stage_env({"PATH": "/usr/local/cuda/bin:/usr/bin", "CUDA_PATH": "/usr/local/cuda"}, first)
    assert env["CUDA_HOME"] == str(first) and env["CUDACXX"] == str(first / "bin" / "nvcc")
    assert env["PATH"].split(os.pathsep)[0] == str(first / "bin") and "CUDA_PATH" not in env
    assert "9.9" in toolkit.describe(first)


def test_a_wheel_only_toolkit_gets_a_driver_stub_from_its_cuda_h_and_the_stages_link_with_it(
    mirror: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CUDA 13: no archive, no NVIDIA stub; the runtime wheel's cuda.h gives lib64/stubs/libcuda.so."""
    header = b"typedef int CUresult;\n#define cuMemAlloc cuMemAlloc_v2\nCUresult cuMemAlloc(void **p, long n);\n"
    runtime = _wheel("nvidia-fake-runtime", "9.9.1", {"nvidia/cu99/include/cuda.h": header})
    (mirror["wheels"] / runtime[0]).write_bytes(runtime[1])  # type: ignore[operator]
    lock = dict(mirror["lock"])  # type: ignore[call-overload]
    entry = {"name": "nvidia-fake-runtime", "version": "9.9.1", "part": "compiler", "file": runtime[0]}
    lock["archive"], lock["wheel"] = [], [*lock["wheel"], {**entry, "sha256": _sha(runtime[1]), "url": ""}]
    lock.pop("redist")
    write_lock(mirror["locks"], lock)  # type: ignore[arg-type]
    record = install_cuda.install("9.9", "x86_64", tmp_path / "cuda", [], mirror["locks"])
    stub = tmp_path / "cuda" / "lib64" / "stubs" / "libcuda.so"
    assert record["driver_stub"]["libcuda.so"] == "generated" and record["driver_stub"]["symbols"] == 1
    assert stub.read_bytes()[:4] == b"\x7fELF" and not (stub.parent / "libcuda.so.1").exists()
    assert json.loads((tmp_path / "cuda" / "wf-toolkit.json").read_text())["driver_stub"] == record["driver_stub"]
    # The host-mode stages: the stubs on the link path (LIBRARY_PATH, after what the job set), never the run path.
    env = toolkit.stage_env({"PATH": "/usr/bin", "LIBRARY_PATH": "/opt/x/lib"}, tmp_path / "cuda")
    assert env["LIBRARY_PATH"] == os.pathsep.join(["/opt/x/lib", str(stub.parent)]) and "LD_LIBRARY_PATH" not in env
    # A toolkit installed before the installer made stubs is not reused: the cache key holds the layout.
    monkeypatch.setattr(toolkit, "installer", lambda bundle: install_cuda)
    monkeypatch.setattr(install_cuda, "LOCKS", mirror["locks"])
    now = toolkit.prefix_for(ROOT / "buildspecs", "9.9", "x86_64", [], tmp_path)
    monkeypatch.setattr(install_cuda, "LAYOUT", 1)
    assert toolkit.prefix_for(ROOT / "buildspecs", "9.9", "x86_64", [], tmp_path) != now
