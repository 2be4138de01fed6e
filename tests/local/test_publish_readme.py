"""docs/publishing.md's block, run as written against the embedded AWS and a real
index server (pypiserver on 127.0.0.1, uploads need the token): the stack's channel `demo` holds a wheel
signed with the stack's own KMS key, as Attest leaves it; the block stores the token in Secrets Manager,
publishes (uploaded, then skipped), installs from the index into a fresh venv, imports, and verifies the
bytes downloaded back against the provenance in the stack's bucket.

The wheel is a small pure-Python `wf-example-ops` (no torch dependency), so the fresh venv installs
from the local index alone; the built demo's own transcript is in the issue's closing note.
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

import pytest

from tests.helpers import readme_block, run_readme_block
from tests.indexserver import envelope_for, pypiserver, tiny_wheel
from wheelfoundry.publishing import provenance
from wheelfoundry.publishing.index import publish_index
from wheelfoundry_local import EmbeddedAws

pytestmark = pytest.mark.heavy  # several real builds: `make test-heavy` (.ci/heavy), not `make test`

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MARKER = "<!-- readme-publish: tests/local/test_publish_readme.py runs this block -->"
TOKEN = "pypi-AgEIcHlwaS5vcmc-readme-test"


def seed_demo_channel(aws: EmbeddedAws, bucket: str, key_arn: str, tmp_path: Path) -> Path:
    """The channel as a run leaves it: the wheel (sha256 in its metadata), its envelope, the index."""
    wheel = tiny_wheel(tmp_path / "built", "wf-example-ops", "0.1.0", "def add(a, b):\n    return a + b\n")
    s3, key = aws.client("s3"), f"wheels/demo/wf-example-ops/{wheel.name}"
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    s3.put_object(Bucket=bucket, Key=key, Body=wheel.read_bytes(), Metadata={"sha256": digest})
    signed = envelope_for(wheel, provenance.kms_signer(aws.client("kms"), key_arn), key_arn)
    s3.put_object(Bucket=bucket, Key=key + provenance.SUFFIX, Body=signed)
    publish_index(s3, bucket, "demo")
    return wheel


@pytest.mark.slow
def test_readme_publish_block(aws: EmbeddedAws, tmp_path: Path) -> None:
    stack = aws.deploy(ROOT / "template.yaml")
    wheel = seed_demo_channel(aws, stack.outputs["WheelBucketName"], stack.outputs["ProvenanceKeyArn"], tmp_path)
    with pypiserver(tmp_path / "index", {"__token__": TOKEN}) as index:
        script = readme_block(MARKER)
        script = re.sub(r"^EP=http://127\.0\.0\.1:PORT.*$", f"EP={aws.endpoint}", script, count=1, flags=re.M)
        script = re.sub(r"^INDEX=http://127\.0\.0\.1:8080.*$", f"INDEX={index}", script, count=1, flags=re.M)
        assert f"EP={aws.endpoint}" in script and f"INDEX={index}" in script
        done = run_readme_block(script, tmp_path, {"PYPI_TOKEN": TOKEN})
        served = (tmp_path / "index" / "packages" / wheel.name).read_bytes()
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert f"UPLOADED {wheel.name}: sha256:" in out, out
    assert f"SKIPPED  {wheel.name}: already on {index}/ with the same sha256" in out, out
    assert re.search(r"^imported .*/try/lib/python3\.\d+/site-packages/wf_example_ops/__init__\.py$", out, re.M), out
    assert f"OK   {wheel.name}: signed provenance verified" in out, out
    assert served == wheel.read_bytes()
