"""One rule finds a build's Python on every executor and in host mode (wfbuild.envs.find_python).

Fake installations are laid out as pyenv, uv and PATH keep them, with links to this interpreter (so
each reports this interpreter's version); a pyenv shim that fails, as it does for a version that is not
active, is never taken.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from wfbuild import envs

VERSION = f"{sys.version_info[0]}.{sys.version_info[1]}"
VAR = "WF_PYTHON_" + VERSION.replace(".", "_")


def _link(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(sys.executable)
    return str(path)


def _shim(folder: Path) -> None:
    """What a pyenv shim does for a version that is not active: fail."""
    folder.mkdir(parents=True)
    shim = folder / f"python{VERSION}"
    shim.write_text(f"#!/bin/sh\necho 'pyenv: python{VERSION}: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)


def _bare(tmp_path: Path, **extra: str) -> dict[str, str]:
    """An environment where only what the test lays out can be found (this interpreter excepted)."""
    return {"HOME": str(tmp_path / "home"), "PATH": str(tmp_path / "empty"), **extra}


def test_pyenv_installs_are_found_and_its_shims_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(envs.sys, "version_info", (3, 0, 0))  # this interpreter is not the one asked for
    root = tmp_path / "home" / ".pyenv"
    _shim(root / "shims")
    real = _link(root / "versions" / f"{VERSION}.7" / "bin" / f"python{VERSION}")
    env = _bare(tmp_path, PATH=str(root / "shims"))
    assert envs.python_candidates(VERSION, env) == [
        f"/opt/python/cp{VERSION.replace('.', '')}-cp{VERSION.replace('.', '')}/bin/python",
        real,
    ]
    assert envs.find_python(VERSION, env) == real


def test_uv_managed_pythons_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(envs.sys, "version_info", (3, 0, 0))
    uv = tmp_path / "uv"
    real = _link(uv / f"cpython-{VERSION}.4-linux-x86_64-gnu" / "bin" / f"python{VERSION}")
    assert envs.find_python(VERSION, _bare(tmp_path, UV_PYTHON_INSTALL_DIR=str(uv))) == real
    default = _link(
        tmp_path / "home" / ".local/share/uv/python" / f"cpython-{VERSION}.9-linux-x86_64-gnu/bin/python{VERSION}"
    )
    assert envs.find_python(VERSION, _bare(tmp_path)) == default


def test_the_variable_wins_and_path_is_the_last_resort(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(envs.sys, "version_info", (3, 0, 0))
    on_path = _link(tmp_path / "bin" / f"python{VERSION}")
    assert envs.find_python(VERSION, _bare(tmp_path, PATH=str(tmp_path / "bin"))) == on_path
    chosen = _link(tmp_path / "chosen" / "python")
    assert envs.find_python(VERSION, _bare(tmp_path, PATH=str(tmp_path / "bin"), **{VAR: chosen})) == chosen


def test_a_missing_version_names_what_to_install_or_set(tmp_path: Path) -> None:
    _shim(tmp_path / "home" / ".pyenv" / "shims")
    env = _bare(tmp_path, PATH=str(tmp_path / "home" / ".pyenv" / "shims"))
    with pytest.raises(FileNotFoundError) as info:
        envs.find_python("3.99", env)
    message = str(info.value)
    assert message.startswith("no Python 3.99 on this machine")
    assert "uv python install 3.99" in message and "WF_PYTHON_3_99=/path/to/python3.99" in message
    assert "shims" not in message  # a shim is never a candidate


def test_every_executor_uses_the_rule() -> None:
    """CodeBuild's buildspec no longer guesses interpreters itself; the runner's rule is the only one."""
    root = Path(__file__).resolve().parents[2]
    buildspec = (root / "buildspecs" / "codebuild" / "build.yml").read_text()
    assert "pyenv/versions" not in buildspec and "WF_PYTHON_${" not in buildspec
