"""A torch extension with its own static C++ runtime is refused (it crashed on the GPU machine)."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

from wfbuild.wheels.repair import static_cxx_runtime

SOURCE = '#include <stdexcept>\nextern "C" int fail(int x) { if (x) throw std::runtime_error("no"); return 0; }\n'


def _wheel(tmp: Path, static: bool) -> Path:
    (tmp / "stub.c").write_text("int c10_stub(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp / "libc10.so"), str(tmp / "stub.c")], check=True)
    (tmp / "ext.cpp").write_text(SOURCE)
    flags = ["-static-libstdc++"] if static else []
    out = tmp / f"_C{'_static' if static else ''}.so"
    subprocess.run(
        [
            "g++",
            "-shared",
            "-fPIC",
            *flags,
            "-o",
            str(out),
            str(tmp / "ext.cpp"),
            f"-L{tmp}",
            "-Wl,--no-as-needed",  # before -lc10: keep the NEEDED entry a real extension has
            "-lc10",
        ],
        check=True,
    )
    wheel = tmp / f"demo-1.0-cp311-cp311-linux_x86_64{'_s' if static else ''}.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(out, "demo/_C.so")
    return wheel


def test_static_libstdcxx_beside_torch_is_found(tmp_path: Path) -> None:
    assert static_cxx_runtime(_wheel(tmp_path, static=True)) == ["demo/_C.so"]


def test_the_usual_dynamic_libstdcxx_passes(tmp_path: Path) -> None:
    assert static_cxx_runtime(_wheel(tmp_path, static=False)) == []
