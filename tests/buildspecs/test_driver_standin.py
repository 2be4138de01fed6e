"""The driver stand-in (wfbuild.wheels.driver_standin): a wheel whose module links the driver API imports on a host
without an NVIDIA driver, for its smoke test and the test of its published bytes; its driver calls return
CUDA_ERROR_STUB_LIBRARY. The module here is built like a -lcuda extension: linked against a libcuda.so.1."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from wfbuild.wheels import driver_standin

CALLER = """int cuDriverGetVersion(int *version);
int cuInit(unsigned int flags);
int caller_version(void) { int v = 0; int rc = cuInit(0); return rc ? rc : cuDriverGetVersion(&v); }
"""
LOAD = "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).caller_version())"


def module_wheel(tmp_path: Path) -> tuple[Path, Path]:
    """A wheel holding pkg/_C.so, which names libcuda.so.1 (linked against a libcuda of the two functions)."""
    link = driver_standin.stand_in(["cuDriverGetVersion", "cuInit"], tmp_path / "link")
    assert link is not None
    (tmp_path / "caller.c").write_text(CALLER)
    module = tmp_path / "_C.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(module), str(tmp_path / "caller.c"), f"-L{link}",
                    f"-l:{driver_standin.DRIVER}"], check=True)  # fmt: skip
    wheel = tmp_path / "pkg-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(module, "pkg/_C.so")
        archive.writestr("pkg/__init__.py", "")
    return wheel, module


def load(module: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {"PATH": os.environ["PATH"], **env}
    return subprocess.run([sys.executable, "-c", LOAD, str(module)], env=clean, capture_output=True, text=True)


def test_a_module_naming_the_driver_imports_with_the_stand_in_and_its_calls_say_stub(tmp_path: Path) -> None:
    wheel, module = module_wheel(tmp_path)
    assert driver_standin.driver_imports(wheel) == ["cuDriverGetVersion", "cuInit"]
    env = driver_standin.import_env(wheel, tmp_path / "work")
    if driver_standin.host_has_driver():  # a GPU host: its own driver serves the import, no stand-in
        assert env == {} and load(module, {}).returncode == 0
        return
    assert "libcuda.so.1" in load(module, {}).stderr  # without it: the loader cannot find the driver
    assert env == {"LD_LIBRARY_PATH": str(tmp_path / "work" / "driver-standin")}
    loaded = load(module, env)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == str(driver_standin.STUB_LIBRARY)  # CUDA_ERROR_STUB_LIBRARY, as NVIDIA's stub


def test_a_wheel_that_does_not_name_the_driver_gets_nothing(tmp_path: Path) -> None:
    wheel = tmp_path / "plain-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("plain/__init__.py", "")
    assert driver_standin.driver_imports(wheel) == [] and driver_standin.import_env(wheel, tmp_path) == {}
