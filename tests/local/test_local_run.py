"""``wheelfoundry local run``: any extension source (folder or sdist) through the embedded AWS, no tests run."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wheelfoundry_local.demo import pack_source

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "fixtures" / "tiny_ext"


def wheelfoundry(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "wheelfoundry_cli.main", *args]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=900, check=False)


@pytest.mark.heavy  # a whole local run: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_local_run_builds_an_sdist_publishes_it_and_copies_the_wheel(tmp_path: Path) -> None:
    sdist = tmp_path / "wf-tiny-ext-0.1.0.tar.gz"
    sdist.write_bytes(pack_source(TINY, "wf-tiny-ext-0.1.0"))
    request = tmp_path / "request.json"
    body = {"framework": "extension", "name": "wf-tiny-ext", "source": {"s3": "s3://placeholder/sources/x.tar.gz"}}
    body |= {"torch": ["2.13"], "python": ["3.11"], "torch_index": "pip", "channel": "mine"}
    request.write_text(json.dumps(body))
    done = wheelfoundry("local", "run", str(request), "--source", str(sdist), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    assert wheel.name.startswith("wf_tiny_ext-0.1.0-cp311-cp311-manylinux_")  # merged layout: no local label
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert f"{wheel.name}  {wheel.stat().st_size / 1024:.1f} KiB  sha256:{digest}" in done.stdout
    assert "/simple/mine/" in done.stdout and "run passed" in done.stdout
    assert "running the extension's tests" not in done.stdout  # local run never runs the source's tests


def test_local_run_refuses_a_source_that_is_neither_folder_nor_sdist(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.txt"
    bogus.write_text("not a source")
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"framework": "extension", "name": "x", "torch": ["2.13"]}))
    done = wheelfoundry("local", "run", str(request), "--source", str(bogus), cwd=tmp_path)
    assert done.returncode == 2
    assert "expected a source folder or an sdist .tar.gz" in done.stdout and "Traceback" not in done.stderr


@pytest.mark.heavy  # a whole local run: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_a_failing_build_reads_like_a_build_tools_failure(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(TINY, source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    (source / "src" / "core.c").write_text("this is not C\n")
    request = tmp_path / "request.json"
    body = {"framework": "extension", "name": "wf-tiny-ext", "source": {"s3": "s3://placeholder/sources/x.tar.gz"}}
    body |= {"torch": ["2.13"], "python": ["3.11"], "torch_index": "pip", "options": {"executor": "ec2"}}
    request.write_text(json.dumps(body))
    done = wheelfoundry("local", "run", str(request), "--source", str(source), cwd=tmp_path)
    assert done.returncode == 1
    out = done.stdout
    assert "run FAILED: 1 failure(s)" in out
    assert "  wf-tiny-ext-cpu-x86_64: BuildFailed at stage build-torch2.13.0-cp311-cpu-x86_64" in out
    assert "    src/core.c:1:1: error: unknown type name" in out  # the compiler's own first error
    log = next(line.split("log here: ", 1)[1] for line in out.splitlines() if "log here: " in line)
    assert "this is not C" in Path(log).read_text() or "core.c" in Path(log).read_text()
    assert "stackTrace" not in out and "errorType" not in out and "Traceback" not in out + done.stderr
    # each change of state is printed once: a finished job's line is never repeated
    ended = [line for line in out.splitlines() if "failed, instance terminated" in line]
    assert len(ended) == 1
