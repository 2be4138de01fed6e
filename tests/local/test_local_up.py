"""`wheelfoundry local up` in a subprocess, driven by the real AWS CLI with the documentation's own commands.

One real build (the tiny extension, about a minute): docs/local.md's "Try the AWS CLI locally" block runs
as written, with the endpoint `local up` printed, the tiny request in place of the demo's and a
temporary --dest; then `local down` ends it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import readme_block, run_readme_block

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TINY = ROOT / "tests" / "fixtures" / "tiny_ext"
MARKER = "<!-- readme-local-cli: tests/local/test_local_up.py runs this block -->"
ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def tiny_request(tmp_path: Path) -> Path:
    request = {
        "framework": "extension",
        "name": "wf-tiny-ext",
        "source": {"s3": "s3://wf-local-sources/sources/wf-tiny-ext.tar.gz"},
        "torch": ["2.13"],
        "cuda": ["cpu"],
        "python": ["3.11"],
        "torch_index": "pip",
        "channel": "ci",
    }
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(request))
    return path


def wait_for_state(state: Path, proc: subprocess.Popen[str], timeout: float = 180) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while not state.exists():
        assert proc.poll() is None, f"local up exited {proc.returncode}: {proc.stdout.read() if proc.stdout else ''}"
        assert time.monotonic() < deadline, "local up did not come up"
        time.sleep(0.5)
    loaded: dict[str, object] = json.loads(state.read_text())
    return loaded


@pytest.mark.heavy  # a whole run through local up: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
@pytest.mark.slow
def test_readme_aws_cli_commands_build_against_local_up(tmp_path: Path) -> None:
    state_dir, dest = tmp_path / "state", tmp_path / "dist"
    request = tiny_request(tmp_path)
    env = {**os.environ, **ENV, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "WHEELFOUNDRY_ENDPOINT_URL"):
        env.pop(name, None)
    command = [str(BIN / "wheelfoundry"), "local", "up", "--state-dir", str(state_dir)]
    proc = subprocess.Popen(
        [*command, "--request", str(request), "--source", str(TINY)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        up = wait_for_state(state_dir / "up.json", proc)
        endpoint = str(up["endpoint"])
        script = readme_block(MARKER)
        script = re.sub(r"^EP=http://127\.0\.0\.1:PORT.*$", f"EP={endpoint}", script, count=1, flags=re.M)
        script = script.replace("file://examples/requests/extension-demo.json", f"file://{request}")
        script = script.replace("--dest dist/", f"--dest {dest}")
        assert f"EP={endpoint}" in script and str(request) in script
        done = run_readme_block(script, ROOT, ENV)
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert "SUCCEEDED" in lines, done.stdout
        listed = [ln for ln in lines if ln.endswith(".whl") and "wheels/ci/wf-tiny-ext/" in ln]
        assert len(listed) == 1, done.stdout  # aws s3 ls
        (wheel,) = dest.glob("wf_tiny_ext-*.whl")
        assert wheel.name in listed[0]
        assert hashlib.sha256(wheel.read_bytes()).hexdigest()[:16] in done.stdout  # fetch printed it, checked

        layers = subprocess.run(
            [str(BIN / "aws"), "--endpoint-url", endpoint, "lambda", "list-functions", "--output", "json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        functions = json.loads(layers.stdout)["Functions"]
        validate = next(f for f in functions if "ValidateFunction" in f["FunctionName"])
        assert [la["Arn"].split(":")[6] for la in validate["Layers"]] == ["AWSLambdaPowertoolsPythonV3-python312-arm64"]
    finally:
        down = subprocess.run(
            [str(BIN / "wheelfoundry"), "local", "down", "--state-dir", str(state_dir)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert down.returncode == 0, down.stdout + down.stderr
    assert code == 0
    assert not (state_dir / "up.json").exists()


def test_local_up_takes_an_sdist_as_it_is_and_packs_a_folder(tmp_path: Path) -> None:
    """`local up --source` takes what `local run --source` takes: an sdist went into the bucket packed
    inside another tar.gz, and its build failed with 'Neither setup.py nor pyproject.toml found'."""
    import tarfile
    from types import SimpleNamespace

    import boto3
    from moto import mock_aws

    from wheelfoundry_local.up import upload_to_request_uri

    sdist = tmp_path / "wf_tiny_ext-0.1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(TINY, arcname="wf_tiny_ext-0.1.0")
    request = tiny_request(tmp_path)
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        aws = SimpleNamespace(client=lambda service: s3)
        uri = upload_to_request_uri(aws, request, sdist)
        assert uri == "s3://wf-local-sources/sources/wf-tiny-ext.tar.gz"
        body = s3.get_object(Bucket="wf-local-sources", Key="sources/wf-tiny-ext.tar.gz")["Body"].read()
        assert body == sdist.read_bytes()
        upload_to_request_uri(aws, request, TINY)
        packed = tmp_path / "packed.tar.gz"
        packed.write_bytes(s3.get_object(Bucket="wf-local-sources", Key="sources/wf-tiny-ext.tar.gz")["Body"].read())
        with tarfile.open(packed) as tar:
            assert "wf-tiny-ext/setup.py" in tar.getnames()


def test_local_up_refuses_a_source_that_is_no_folder_or_sdist_before_it_starts(tmp_path: Path) -> None:
    from wheelfoundry_local.up import UpError, run_up

    notes = tmp_path / "notes.txt"
    notes.write_text("not a source")
    with pytest.raises(UpError, match=r"--source .*notes\.txt: expected a source folder or an sdist \.tar\.gz"):
        run_up(ROOT, tmp_path / "state", tiny_request(tmp_path), notes)
    assert not (tmp_path / "state").exists(), "nothing was started"
