"""Loaders for the files that ship: tests read these, never copies of them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from samtranslator.yaml_helper import yaml_parse

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "template.yaml"
ASL = ROOT / "statemachine" / "build.asl.json"


@cache
def template() -> dict[str, Any]:
    return yaml_parse(TEMPLATE.read_text())  # type: ignore[no-any-return]


def resources(kind: str | None = None) -> dict[str, dict[str, Any]]:
    found = template()["Resources"]
    return {k: v for k, v in found.items() if kind is None or v["Type"] == kind}


@cache
def asl() -> dict[str, Any]:
    return json.loads(ASL.read_text())  # type: ignore[no-any-return]


def all_states(definition: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Every state, Map and Parallel branches included, by name."""
    definition = definition or asl()
    states: dict[str, dict[str, Any]] = {}
    for name, state in definition["States"].items():
        states[name] = state
        for inner in [state.get("ItemProcessor"), state.get("Iterator"), *state.get("Branches", [])]:
            if inner:
                states.update(all_states(inner))
    return states


def substitutions_used() -> set[str]:
    return set(re.findall(r"\$\{(\w+)\}", ASL.read_text()))


def build_script() -> str:
    """The bootstrap script inside the SSM Build document."""
    doc = resources("AWS::SSM::Document")["BuildDocument"]["Properties"]["Content"]
    step = doc["mainSteps"][0]
    return "\n".join(step["inputs"]["runCommand"]) + "\n"


def readme_block(marker: str) -> str:
    """The first ```bash block after ``marker`` in README.md or a page under docs/: the commands a test runs
    as written (the marker names the test)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [page.read_text() for page in pages if marker in page.read_text()]
    assert len(found) == 1, f"{marker} is on {len(found)} pages of README.md and docs/, not one"
    match = re.search(r"```bash\n(.*?)```", found[0].split(marker, 1)[1], re.S)
    assert match, f"the documentation lost the block after {marker}"
    return match.group(1)


def run_readme_block(script: str, cwd: Path, extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a README block with bash -euo pipefail, this venv's commands first on PATH, no AWS profile or
    endpoint of the caller's shell."""
    env = {**os.environ, **extra_env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "WHEELFOUNDRY_ENDPOINT_URL", "TWINE_PASSWORD"):
        env.pop(name, None)
    argv = ["bash", "-euo", "pipefail", "-c", script]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=420)


@contextmanager
def s3_bucket(bucket: str) -> Iterator[Any]:
    """A moto S3 client holding one empty bucket: the unit tests' stand-in for the stack's wheel bucket."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=bucket)
        yield client


def http_get(url: str, accept: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """GET as an anonymous client: status, headers and body, also of an error answer."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


CACHE_STATS = re.compile(r"compiler cache: (\d+) requests, (\d+) hits, (\d+) misses")


def assert_compiled(folder: Path) -> None:
    """A local run under ``folder`` compiled its sources: each build's compiler cache (the runner's stats
    line in its log) reports misses and no hit. A test that means to build fails here, saying so, if a build
    was skipped or served from a cache instead."""
    logs = [p.read_text(errors="replace") for p in folder.rglob("*.log") if p.is_file()]
    stats = [m for text in logs for m in CACHE_STATS.finditer(text)]
    assert stats, f"{folder}: no build log reports its compiler cache: nothing shows this run compiled"
    for m in stats:
        assert int(m[2]) == 0 and int(m[3]) > 0, f"{folder}: a build was served from a cache, not compiled: {m[0]}"
