"""A stand-in for the NVIDIA driver (libcuda.so.1) where a wheel's import needs it and the host has none.

A CUDA extension that calls the driver API links ``-lcuda`` (FlashAttention-3's Hopper build does): its module
names ``libcuda.so.1``, which only an NVIDIA driver installs. The farm's build and test hosts have no GPU and no
driver, so such a module cannot even be imported there, and its smoke test and the test of its published bytes
would fail for a reason that is the host's, not the package's. For those imports (and only when the host has no
driver), the smoke stage puts a directory on LD_LIBRARY_PATH holding a ``libcuda.so.1`` built here that defines
each driver function the wheel's files import and returns CUDA_ERROR_STUB_LIBRARY (34) from every one, as
NVIDIA's own link stub does. The import and everything that does not reach the driver is tested; a call that
does gets that error, as on a machine without a GPU. The GPU step (options.gpu_test) loads the real driver.
"""

from __future__ import annotations

import ctypes
import io
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from wfbuild.wheels.abi import symbols

DRIVER = "libcuda.so.1"
STUB_LIBRARY = 34  # CUDA_ERROR_STUB_LIBRARY in cuda.h: "the CUDA driver is a stub library"
DRIVER_FUNCTION = re.compile(r"^cu[A-Z]\w*$")  # the driver API's names: cuInit, cuDriverGetVersion, cuMemGetInfo_v2


def driver_imports(wheel: Path) -> list[str]:
    """The driver functions this wheel's compiled files import, where a file names libcuda.so.1; [] if none does."""
    found: set[str] = set()
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if not re.search(r"\.so(\.\d+)*$", name):
                continue
            data = archive.read(name)
            try:
                dynamic = ELFFile(io.BytesIO(data)).get_section_by_name(".dynamic")
            except ELFError:
                continue
            if not isinstance(dynamic, DynamicSection):
                continue
            needed = [str(getattr(t, "needed", "")) for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
            if DRIVER in needed:
                found |= {s for s in symbols(io.BytesIO(data))[0] if DRIVER_FUNCTION.match(s)}
    return sorted(found)


def host_has_driver() -> bool:
    try:
        ctypes.CDLL(DRIVER)
    except OSError:
        return False
    return True


def stand_in(functions: list[str], folder: Path) -> Path | None:
    """``folder`` holding a libcuda.so.1 that defines ``functions`` (each returning CUDA_ERROR_STUB_LIBRARY), built
    with the host's C compiler; None where there is none (the import then fails as it would)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "libcuda_standin.c"
    lines = [f"/* WheelFoundry's driver stand-in: every call returns {STUB_LIBRARY} (CUDA_ERROR_STUB_LIBRARY). */"]
    lines += [f"int {name}(void) {{ return {STUB_LIBRARY}; }}" for name in functions]
    source.write_text("\n".join(lines) + "\n")
    argv = [compiler, "-shared", "-fPIC", "-O0", f"-Wl,-soname,{DRIVER}", "-o", str(folder / DRIVER), str(source)]
    subprocess.run(argv, check=True, capture_output=True)
    return folder


def import_env(wheel: Path, work: Path) -> dict[str, str]:
    """LD_LIBRARY_PATH for the wheel's import and tests on this host: the stand-in's folder when the wheel needs
    the driver and the host has none, else nothing. Says what it did."""
    try:
        functions = driver_imports(wheel)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:  # the import says what is wrong with the wheel
        print(f"  {wheel.name}: its files' driver imports not read ({exc}); no driver stand-in")
        return {}
    if not functions or host_has_driver():
        return {}
    try:
        folder = stand_in(functions, work / "driver-standin")
    except subprocess.CalledProcessError as exc:
        print(f"  the driver stand-in did not build ({(exc.stderr or b'').decode(errors='replace')[-300:]})")
        return {}
    if folder is None:
        print(f"  {wheel.name} needs {DRIVER} and this host has neither a driver nor a C compiler for a stand-in")
        return {}
    said = ", ".join(functions[:5])
    print(f"  {wheel.name} needs {DRIVER} ({said}); this host has no NVIDIA driver: the import uses a stand-in")
    print("  whose calls return CUDA_ERROR_STUB_LIBRARY; the GPU step (options.gpu_test) loads the real driver")
    return {"LD_LIBRARY_PATH": str(folder)}
