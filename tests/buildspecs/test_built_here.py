"""A build stage whose setup.py hands pip somebody else's wheel fails, naming the binary (wfbuild.wheels.built_here).

The real stage script (build-library.sh) builds tests/fixtures/tiny_ext twice in a thin venv over this
one's setuptools: as it is, and with a ``bdist_wheel`` that copies a prebuilt wheel instead of building,
as causal-conv1d 1.7.0's does with the wheel it downloads from GitHub unless CAUSAL_CONV1D_FORCE_BUILD=TRUE.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import setuptools

from tests.buildspecs.conftest import BUNDLE, run, tool_env
from wfbuild.wheels import built_here

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "tiny_ext"
PREBUILT = """
import glob, os, shutil
from setuptools.command.bdist_wheel import bdist_wheel

class Prebuilt(bdist_wheel):  # causal-conv1d's CachedWheelsCommand, with the download done beforehand
    def run(self):
        os.makedirs(self.dist_dir, exist_ok=True)
        for wheel in glob.glob("prebuilt/*.whl"):
            shutil.copy(wheel, self.dist_dir)
"""


def _thin_venv(dest: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    (site,) = (dest / "lib").glob("python3*/site-packages")
    (site / "tools.pth").write_text(str(Path(setuptools.__file__).parents[1]) + "\n")  # setuptools, wheel, pip
    return dest


def _stage(tmp: Path, env_dir: Path, src: Path, name: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp / f"out-{name}"
    env = tool_env(tmp / "cache")
    env |= {"WF_SRC_DIR": str(src), "WF_ENV_DIR": str(env_dir), "WF_OUT_DIR": str(out), "WF_VERSION_SCHEME": "git"}
    env |= {"MAX_JOBS": "1", "WF_BUILD_COPY": str(tmp / f"copy-{name}")}
    return run(["bash", str(BUNDLE / "stages" / "build-library.sh")], env), out


def test_a_wheel_built_in_the_tree_passes_and_a_prebuilt_one_fails_the_stage_naming_its_binary(tmp_path: Path) -> None:
    env_dir = _thin_venv(tmp_path / "env")
    built, out = _stage(tmp_path, env_dir, TINY, "built")
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (binary,) = [n for n in archive.namelist() if n.endswith(".so")]
    prebuilt = tmp_path / "prebuilt-src"
    shutil.copytree(TINY, prebuilt)
    (prebuilt / "prebuilt").mkdir()
    shutil.copy(wheel, prebuilt / "prebuilt")  # the same bytes: compiled, but not by the stage that ships them
    setup = prebuilt / "setup.py"
    setup.write_text(
        PREBUILT
        + setup.read_text().replace(
            "    python_requires=", '    cmdclass={"bdist_wheel": Prebuilt},\n    python_requires='
        )
    )
    handed, _ = _stage(tmp_path, env_dir, prebuilt, "prebuilt")
    assert handed.returncode == 1, handed.stdout[-3000:]
    said = handed.stdout + handed.stderr
    assert f"{binary} in {wheel.name} was not compiled by this build" in said, said[-3000:]
    assert "CAUSAL_CONV1D_FORCE_BUILD=TRUE" in said and "the wheel holds binaries this build did not compile" in said


def test_only_files_written_since_the_build_began_count(tmp_path: Path) -> None:
    tree, wheels = tmp_path / "tree", tmp_path / "wheels"
    (tree / "build").mkdir(parents=True)
    wheels.mkdir()
    lib = b"\x7fELF" + os.urandom(64)
    (tree / "build" / "_core.so").write_bytes(lib)  # as an sdist or checkout left it: before the build
    old = time.time() - 3600
    os.utime(tree / "build" / "_core.so", (old, old))
    marker = tmp_path / "marker"
    marker.touch()
    with zipfile.ZipFile(wheels / "pkg-1.0-cp311-cp311-linux_x86_64.whl", "w") as archive:
        archive.writestr("pkg/_core.so", lib)
        archive.writestr("pkg/__init__.py", "")
    argv = ["--wheel-dir", str(wheels), "--tree", str(tree), "--marker", str(marker)]
    assert built_here.main(argv) == 1  # shipped in the source, not compiled
    (tree / "build" / "_core.so").touch()  # written by the build
    assert built_here.main(argv) == 0
    (tree / "build" / "_core.so").write_bytes(lib[:-1] + b"x")  # the same size, other bytes
    assert built_here.main(argv) == 1
