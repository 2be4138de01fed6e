"""Shared, expensive things for the on-instance tests, built once per session.

- ``cache_dir``: the session's WF_CACHE_DIR (tests/conftest.py), so the torch build env (pip install
  torch==2.13.0 from this machine's wheel, ~45 s) is created once and reused by every test, the
  runner's own stages and the embedded AWS's builds, exactly as repeated local builds reuse it.
- ``torch_repair``: auditwheel's analysis of the real torch wheel takes ~85 s on one core; it
  starts in the background when first requested and is collected by the test that checks it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.buildspecs.jobs import ROOT

BUNDLE = ROOT / "buildspecs"
EXAMPLE = ROOT / "examples" / "extension"
# The real CPU torch wheel, pinned by the Docker test bed's hash lock (PyTorch's CPU wheel, as the
# project's own venv installs it): fetched once into the shared cache with pip --require-hashes.
TORCH_LOCK = ROOT / "tools" / "testbed" / "wheelhouse-requirements.txt"
PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"


def tool_env(cache_dir: Path, **extra: str) -> dict[str, str]:
    """The environment the runner gives a host-mode stage: tools Python first, wfbuild importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WF_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")])
    env.update({"PYTHONPATH": str(BUNDLE), "WF_CACHE_DIR": str(cache_dir), "WF_REPAIR_PLAT": "auto", **extra})
    return env


def run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    print(proc.stdout[-6000:], proc.stderr[-6000:])
    return proc


def example_source(dest: Path) -> Path:
    """A clean copy of the example extension (no in-tree build leftovers)."""
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so")
    shutil.copytree(EXAMPLE, dest, ignore=ignore)
    return dest


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    return Path(os.environ["WF_CACHE_DIR"])  # the session's, shared with every embedded AWS (tests/conftest.py)


@pytest.fixture(scope="session")
def build_env(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the extension job's env-3.11 stage makes: a thin venv over the cached torch==2.13.0 env."""
    dest = tmp_path_factory.mktemp("envs") / "cp311"
    argv = [
        sys.executable,
        "-m",
        "wfbuild.envs",
        "--python",
        PYTHON,
        "--dest",
        str(dest),
        "--torch",
        "torch==2.13.0",
    ]
    argv += ["--pip", "setuptools", "--pip", "wheel", "--pip", "ninja"]
    proc = run(argv, tool_env(cache_dir))
    assert proc.returncode == 0
    return dest


class Background:
    """A command started now and collected later (our own child; killed at session end if unfinished)."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._handle = log.open("w")
        self.proc = subprocess.Popen(argv, env=env, stdout=self._handle, stderr=subprocess.STDOUT)

    def wait(self, timeout: float = 400) -> tuple[int, str]:
        code = self.proc.wait(timeout=timeout)
        self._handle.close()
        return code, self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._handle.close()


def torch_wheel(cache_dir: Path) -> Path:
    dest = cache_dir / "wheels" / "torch-2.13.0-cpu"
    found = sorted(dest.glob("torch-2.13.0+cpu-*.whl"))
    if found:
        return found[0]
    line = next(ln for ln in TORCH_LOCK.read_text().splitlines() if ln.startswith("torch=="))
    staging = Path(tempfile.mkdtemp(dir=cache_dir, prefix=".torch-"))
    (staging / "req.txt").write_text(line + "\n")
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes"]
    argv += ["--only-binary=:all:", "--dest", str(staging), "-r", str(staging / "req.txt")]
    subprocess.run(argv, check=True)
    (staging / "req.txt").unlink()
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        staging.rename(dest)
    except OSError:  # another worker got there first
        shutil.rmtree(staging, ignore_errors=True)
    return sorted(dest.glob("torch-2.13.0+cpu-*.whl"))[0]


@pytest.fixture(scope="session")
def torch_repair(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Background, Path]]:
    """``python -m wfbuild.wheels.repair`` of the real CPU torch wheel, as the x86_64 CPU job's stage runs it."""
    from tests.buildspecs.jobs import jobs
    from wfbuild.stages.stages import render_stages

    work = tmp_path_factory.mktemp("torch-work")
    job = jobs("torch-2.5.1")["torch2.5.1-cpu-x86_64"]
    stage = next(
        s for s in render_stages(job, work_dir=str(work), bundle_dir=str(BUNDLE)) if s.name == "repair-torch-3.11"
    )
    raw = Path(stage.argv[stage.argv.index("--in-dir") + 1])
    raw.mkdir(parents=True)
    wheel = torch_wheel(cache_dir)
    (raw / wheel.name).symlink_to(wheel)
    # The job asks for the MPI backend, which the PyPI wheel does not have: that expectation is the
    # job's, not the wheel's, so it is dropped here; every other argument is the stage's own.
    argv = list(stage.argv)
    at = argv.index("libmpi")
    del argv[at - 1 : at + 1]
    argv = [sys.executable if a == "python3" else a for a in argv]
    env = tool_env(cache_dir, WF_REPAIR_PLAT="")
    background = Background(argv, env, work / "repair.log")
    yield background, work
    background.stop()
