"""shellcheck on every stage/image script and the CodeBuild commands, hadolint on every Dockerfile."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.buildspecs.jobs import ROOT, jobs

BUILDSPECS = ROOT / "buildspecs"
BIN = Path(sys.executable).parent
SCRIPTS = sorted(BUILDSPECS.rglob("*.sh"))
DOCKERFILES = sorted((BUILDSPECS / "images").glob("*.Dockerfile"))
CODEBUILD = sorted((BUILDSPECS / "codebuild").glob("*.yml"))


def _run(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd)


def test_there_is_something_to_lint() -> None:
    assert len(SCRIPTS) >= 8 and len(DOCKERFILES) == 4 and CODEBUILD


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(BUILDSPECS)))
def test_shellcheck(script: Path) -> None:
    proc = _run([str(BIN / "shellcheck"), "--external-sources", str(script)])
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(BUILDSPECS)))
def test_scripts_follow_house_style(script: Path) -> None:
    text = script.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    assert "eval " not in text
    listed = re.findall(r'^#\s+: "\$\{(\w+):\?\}"', text, re.M)  # the header's list of required variables
    checked = re.findall(r'^: "\$\{(\w+):\?\}"$', text, re.M)  # the lines that enforce it
    assert listed == checked, f"header lists {listed}, script checks {checked}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint(dockerfile: Path) -> None:
    proc = _run([str(BIN / "hadolint"), str(dockerfile)])
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("buildspec", CODEBUILD, ids=lambda p: p.name)
def test_codebuild_commands_pass_shellcheck(buildspec: Path, tmp_path: Path) -> None:
    spec = yaml.safe_load(buildspec.read_text(encoding="utf-8"))
    assert spec["version"] == 0.2 and spec["env"]["shell"] == "bash"
    commands = [c for phase in spec["phases"].values() for c in phase["commands"]]
    script = tmp_path / "codebuild.sh"
    script.write_text("#!/usr/bin/env bash\n" + "\n".join(commands) + "\n", encoding="utf-8")
    proc = _run([str(BIN / "shellcheck"), str(script)])
    assert proc.returncode == 0, proc.stdout
    # build.yml runs the runner; image.yml (runtime images) the image job
    assert (
        "wfbuild.images.image_job" if buildspec.name == "image.yml" else "wfbuild.runner.runner"
    ) in script.read_text()


@pytest.mark.parametrize("name", ["torch-2.5.1", "nightly", "extension"])
def test_every_build_arg_is_declared_by_its_recipe(name: str) -> None:
    for job in jobs(name).values():
        image = job["image"]
        dockerfile = BUILDSPECS / "images" / f"{image['recipe']}.Dockerfile"
        declared = set(re.findall(r"^ARG (\w+)", dockerfile.read_text(encoding="utf-8"), re.M))
        assert {"BASE_IMAGE", *image["build_args"]} <= declared, dockerfile.name
