"""Two `wheelfoundry local run`s of the same source from different working directories give byte-identical
wheels (each run: its own emulated stack, state dir, instance work folders and compiler cache), and
`wheelfoundry verify` passes on what they published and fails on a changed wheel or statement."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import assert_compiled

pytestmark = pytest.mark.heavy  # two local runs: `make test-heavy`, not `make test`
ROOT = Path(__file__).resolve().parents[2]
# Two torch releases' cells merged into one wheel: every step a single cell's run takes, and the merge. The
# demo's own cell is held to the same bytes from two folders by tests/local/test_reproducible_cuda.py (CUDA).
EXAMPLES = [("extension-package.json", "extension-package", "wf_vecops-0.2.0-cp311-cp311-manylinux_")]


def wheelfoundry(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "wheelfoundry_cli.main", *args]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=900, check=False)


def _run(request: str, source: str, cwd: Path) -> Path:
    cwd.mkdir(parents=True)
    done = wheelfoundry(
        "local", "run", str(ROOT / "examples/requests" / request), "--source", str(ROOT / "examples" / source), cwd=cwd
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_compiled(cwd)  # each run built its wheel: same bytes from two builds, not one build served twice
    (wheel,) = (cwd / "dist").glob("*.whl")
    return wheel


@pytest.mark.timeout(1800)
def test_two_local_runs_from_different_folders_give_identical_signed_wheels(tmp_path: Path) -> None:
    for request, source, prefix in EXAMPLES:
        first = _run(request, source, tmp_path / "one" / source)
        second = _run(request, source, tmp_path / "elsewhere" / "two" / source)
        assert first.name == second.name and first.name.startswith(prefix)
        digests = {hashlib.sha256(w.read_bytes()).hexdigest() for w in (first, second)}
        assert len(digests) == 1, f"{first.name}: the two runs' wheels differ: {digests}"
        key = first.parent / "wheelfoundry-provenance.pem"
        done = wheelfoundry("verify", str(first), "--public-key", str(key), cwd=tmp_path)
        assert done.returncode == 0 and done.stdout.startswith(f"OK   {first.name}: signed provenance verified"), (
            done.stdout
        )
        # the other run's stack had its own key: its statement does not verify with this one
        wrong = wheelfoundry("verify", str(second), "--public-key", str(key), cwd=tmp_path)
        assert wrong.returncode == 1 and "signature does not verify" in wrong.stdout, wrong.stdout

    # The wheel, tampered: one byte of the wheel, then one field of the statement.
    wheel = next((tmp_path / "one" / "extension-package" / "dist").glob("*.whl"))
    key = wheel.parent / "wheelfoundry-provenance.pem"
    envelope = json.loads(wheel.with_name(wheel.name + ".provenance.json").read_text())
    byte = tmp_path / "byte"
    byte.mkdir()
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 1
    (byte / wheel.name).write_bytes(bytes(data))
    (byte / (wheel.name + ".provenance.json")).write_text(json.dumps(envelope))
    done = wheelfoundry("verify", str(byte / wheel.name), "--public-key", str(key), cwd=tmp_path)
    assert done.returncode == 1 and f"FAIL {wheel.name}: sha256:{hashlib.sha256(data).hexdigest()}" in done.stdout
    field = tmp_path / "field"
    field.mkdir()
    (field / wheel.name).write_bytes(wheel.read_bytes())
    stmt = json.loads(base64.b64decode(envelope["payload"]))
    stmt["predicate"]["buildDefinition"]["externalParameters"]["request"]["torch"] = ["2.14"]  # was 2.13 and 2.14
    envelope["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
    (field / (wheel.name + ".provenance.json")).write_text(json.dumps(envelope))
    done = wheelfoundry("verify", str(field / wheel.name), "--public-key", str(key), cwd=tmp_path)
    assert done.returncode == 1 and f"FAIL {wheel.name}: signature does not verify" in done.stdout, done.stdout
