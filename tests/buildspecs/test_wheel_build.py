"""wfbuild.wheels.wheel_build, the build stage's PEP 517 frontend: one build_wheel hook, run by the build
environment's Python, without isolation; pip's metadata hook (a second run of setup.py) is gone."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from wfbuild.wheels import wheel_build

SETUP = """
from pathlib import Path
from setuptools import setup
with open(Path(__file__).with_name("runs.log"), "a") as log:  # one line per run of this setup.py
    log.write("ran\\n")
setup(name="wf-once", version="1.0", py_modules=["wf_once"], python_requires=">=3.9")
"""


def project(tmp_path: Path, pyproject: str | None) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "setup.py").write_text(textwrap.dedent(SETUP))
    (src / "wf_once.py").write_text("VALUE = 1\n")
    if pyproject is not None:
        (src / "pyproject.toml").write_text(pyproject)
    return src


def build(src: Path, out: Path, *settings: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "wfbuild.wheels.wheel_build", "--python", sys.executable, "--src", str(src)]
    argv += ["--out", str(out), *(arg for s in settings for arg in ("--config-setting", s))]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)


@pytest.mark.parametrize(
    "pyproject",
    [None, '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'],
    ids=["setup.py only", "pyproject build-backend"],
)
def test_a_setuptools_wheel_runs_setup_py_once(tmp_path: Path, pyproject: str | None) -> None:
    src = project(tmp_path, pyproject)
    done = build(src, tmp_path / "out")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "built wf_once-1.0-py3-none-any.whl"
    (wheel,) = (tmp_path / "out").glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        assert "wf_once.py" in zf.namelist()
    # pip wheel ran it twice here (the metadata hook, then the wheel): for a torch extension, two imports of torch
    assert (src / "runs.log").read_text() == "ran\n"


def test_a_failing_backend_is_one_error_line_after_its_own_output(tmp_path: Path) -> None:
    src = project(tmp_path, None)
    (src / "setup.py").write_text("import sys\nprint('compiler says: no')\nsys.exit(3)\n")
    done = build(src, tmp_path / "out")
    assert done.returncode == 1
    assert "compiler says: no" in done.stdout + done.stderr
    assert f"error: the build backend failed for {src}" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_config_settings_are_pairs_and_a_repeated_key_keeps_every_value() -> None:
    assert wheel_build.config_settings([]) == {}
    assert wheel_build.config_settings(["compile-args=-j4"]) == {"compile-args": "-j4"}
    assert wheel_build.config_settings(["a=1", "a=2", "b=", "a=3"]) == {"a": ["1", "2", "3"], "b": ""}
    for bad in ("compile-args", "=x"):
        with pytest.raises(ValueError, match=f"--config-setting '{bad}': expected KEY=VALUE"):
            wheel_build.config_settings([bad])


def test_a_wheel_whose_requires_python_refuses_the_cells_python_fails_the_build(tmp_path: Path) -> None:
    src = project(tmp_path, None)
    (src / "setup.py").write_text(SETUP.replace(">=3.9", "<3.0"))
    done = build(src, tmp_path / "out")
    assert done.returncode == 1, done.stdout[-2000:]
    version = ".".join(map(str, sys.version_info[:3]))
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: wf_once-1.0-py3-none-any.whl cannot be installed by the cell's Python: it requires Python <3.0,"
        f" not {version}"
    )
    assert not list((tmp_path / "out").glob("*.whl"))  # nothing a later stage could pick up


def test_a_backend_path_outside_the_tree_is_a_build_error_not_a_usage_error(tmp_path: Path) -> None:
    pyproject = '[build-system]\nrequires = []\nbuild-backend = "x"\nbackend-path = [".."]\n'
    src = project(tmp_path, pyproject)
    done = build(src, tmp_path / "out")
    assert done.returncode == 1 and "usage:" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: the build backend failed for {src}: ")
