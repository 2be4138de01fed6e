"""The fatbinary reader (wfbuild.cuda.fatbin) against NVIDIA's own cuobjdump, on objects the locked nvcc compiles here.

nvcc 13.0 comes from the repository's lock (buildspecs/images/scripts/cuda/cuda-13.0-x86_64.toml, installed
under WF_CACHE_DIR as the runner installs it). That lock has no cuobjdump: NVIDIA publishes it as a wheel only
from CUDA 13.2 (https://pypi.org/project/nvidia-cuda-cuobjdump/13.2.51/), so the test fetches that wheel with
pip, its sha256 pinned (a newer cuobjdump reads older fatbinaries). For every object and shared library, in
every variant below, the SASS and PTX the reader finds must be what ``cuobjdump --list-elf`` / ``--list-ptx``
list, entry for entry; cuobjdump names a family-specific cubin (sm_100f) without its ``f``.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.buildspecs.test_device_code import FIXTURES
from tests.buildspecs.test_nvcc import locked_nvcc  # noqa: F401
from wfbuild.cuda import fatbin

pytestmark = pytest.mark.heavy  # installs the CUDA 13.0 lock and compiles a dozen objects: `make test-heavy`

CUOBJDUMP = "nvidia-cuda-cuobjdump==13.2.51"
CUOBJDUMP_SHA256 = "95c69d3ddf0c2c1f535ec44c3433a66aeee19f588d9d22f73356e20b25f12b50"  # PyPI's, manylinux2014_x86_64
VARIANTS = {
    "sm90": ["-gencode", "arch=compute_90,code=sm_90"],
    "sm90a": ["-gencode", "arch=compute_90a,code=sm_90a"],
    "ptx90": ["-gencode", "arch=compute_90,code=compute_90"],
    "ptx90a": ["-gencode", "arch=compute_90a,code=compute_90a"],
    "sm100f-ptx100f": ["-gencode", "arch=compute_100f,code=[sm_100f,compute_100f]"],
    "sm80-sm86-ptx120": [
        "-gencode",
        "arch=compute_80,code=[sm_80,sm_86]",
        "-gencode",
        "arch=compute_120,code=compute_120",
    ],
    "compressed": ["-Xfatbin", "-compress-all", "-gencode", "arch=compute_75,code=[sm_75,compute_75]"],
    "sm120a-sm89": ["-gencode", "arch=compute_120a,code=sm_120a", "-gencode", "arch=compute_89,code=sm_89"],
}


@pytest.fixture(scope="module")
def cuobjdump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = Path(os.environ.get("WF_CACHE_DIR") or tmp_path_factory.mktemp("cache")) / "tools" / "cuobjdump-13.2.51"
    tool = cache / "nvidia" / "cu13" / "bin" / "cuobjdump"
    if not tool.is_file():
        spec = cache.parent / "cuobjdump-13.2.51.txt"
        spec.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text(f"{CUOBJDUMP} --hash=sha256:{CUOBJDUMP_SHA256}\n")
        download = tmp_path_factory.mktemp("cuobjdump")
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes", "-r", str(spec)]
        subprocess.run([*pip, "--only-binary=:all:", "-d", str(download)], check=True)
        (wheel,) = download.glob("*.whl")
        with zipfile.ZipFile(wheel) as zf:
            zf.extract("nvidia/cu13/bin/cuobjdump", cache)
        tool.chmod(0o755)
    return tool


def listed(tool: Path, path: Path) -> collections.Counter[str]:
    """cuobjdump's ELF and PTX entries of ``path`` as sm_XY / compute_XY names."""
    found: collections.Counter[str] = collections.Counter()
    for flag, kind in (("--list-elf", "sm"), ("--list-ptx", "compute")):
        out = subprocess.run([str(tool), flag, str(path)], capture_output=True, text=True, check=False).stdout
        for match in re.finditer(r"^(?:ELF|PTX) file\s+\d+: .*\.(sm_\d+[af]?)\.(?:cubin|ptx)$", out, re.MULTILINE):
            found[f"{kind}_{match[1].removeprefix('sm_')}"] += 1
    return found


def read(path: Path) -> collections.Counter[str]:
    entries = fatbin.read_path(path) or []
    # cuobjdump lists a family-specific cubin under its plain sm (its PTX keeps the "f")
    return collections.Counter(e.code.name.rstrip("f") if e.code.kind == "sass" else e.code.name for e in entries)


def test_the_reader_lists_what_cuobjdump_lists_for_objects_and_shared_libraries(
    locked_nvcc: Path,  # noqa: F811
    cuobjdump: Path,
    tmp_path: Path,
) -> None:
    kernel = FIXTURES / "kernel.cu"
    built: list[Path] = []
    for name, flags in VARIANTS.items():
        obj, lib = tmp_path / f"{name}.o", tmp_path / f"lib{name}.so"
        base = [str(locked_nvcc), "-Xcompiler", "-fPIC", *flags]
        subprocess.run([*base, "-c", str(kernel), "-o", str(obj)], check=True, capture_output=True)
        subprocess.run([*base, "-shared", "-cudart", "shared", str(kernel), "-o", str(lib)], check=True)
        built += [obj, lib]
    rdc = tmp_path / "librdc.so"  # device-linked: .nv_fatbin holds what nvlink kept (cuobjdump reads it alone)
    rdc_flags = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=compute_90"]
    sources = [str(FIXTURES / "rdc_caller.cu"), str(FIXTURES / "rdc_callee.cu")]
    rdc_argv = [str(locked_nvcc), "-shared", "-rdc=true", "-cudart", "shared", "-Xcompiler", "-fPIC", *rdc_flags]
    subprocess.run([*rdc_argv, *sources, "-o", str(rdc)], check=True)
    built += [rdc, FIXTURES / "libmulti.so", FIXTURES / "librdc.so", FIXTURES / "kernel.fatbin"]
    for path in built:
        expected = listed(cuobjdump, path)
        assert expected, f"cuobjdump lists nothing in {path.name}: the comparison proves nothing"
        assert read(path) == expected, (path.name, read(path), expected)
    # the variants really differ: 'a' and 'f' codes, PTX, compression were all met
    seen = {name for path in built for name in read(path)}
    assert {"sm_90a", "compute_90a", "compute_100f", "sm_120a", "compute_75", "sm_86"} <= seen, seen
    assert any(e.compressed for e in fatbin.read_path(tmp_path / "compressed.o") or [])
