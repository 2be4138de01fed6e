"""A consumer gets only what the stack signed: `wheelfoundry fetch` and pip through `wheelfoundry index serve`
against a channel whose wheel was rewritten, index and all, by someone with write access to the bucket.

Cheap on purpose (no build): two small pure-Python wheels are published into the shipped stack's bucket
as Collect leaves them (job prefix, manifest, result, the channel copy with its sha256 metadata and PEP 658
file), then the deployed Attest function signs them with the stack's KMS key and the deployed PublishIndex
function writes the index, both invoked through the embedded AWS's Lambda.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import re
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed
from wheelfoundry_cli.index_server import serving
from wheelfoundry_cli.main import main

from wheelfoundry.publishing import provenance
from wheelfoundry.publishing.index import STATE
from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_user.trust import Keyring, TrustedKey
from wheelfoundry_user.verify import pem_of

CHANNEL, RUN = "ci", "signed-1"


def make_wheel(name: str, body: str, extra: str = "") -> tuple[str, bytes, bytes]:
    """(file name, wheel bytes, METADATA bytes) of an installable pure-Python wheel."""
    dist = f"{name}-0.1.0.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: 0.1.0\n{extra}".encode()
    files = {
        f"{name}/__init__.py": body.encode(),
        f"{dist}/METADATA": metadata,
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for path, data in files.items()
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for path, data in files.items():
            zf.writestr(zipfile.ZipInfo(path, (1980, 1, 1, 0, 0, 0)), data)
        zf.writestr(zipfile.ZipInfo(f"{dist}/RECORD", (1980, 1, 1, 0, 0, 0)), record + f"{dist}/RECORD,,\n")
    return f"{name}-0.1.0-py3-none-any.whl", buffer.getvalue(), metadata


def put_wheel(s3: Any, bucket: str, filename: str, body: bytes, metadata: bytes) -> str:
    """The channel copy as Collect writes it (sha256 metadata; PEP 658 file beside it)."""
    project = filename.split("-", 1)[0].replace("_", "-")
    key = f"wheels/{CHANNEL}/{project}/{filename}"
    meta_sha = {"sha256": hashlib.sha256(metadata).hexdigest()}
    s3.put_object(Bucket=bucket, Key=f"{key}.metadata", Body=metadata, Metadata=meta_sha)
    s3.put_object(Bucket=bucket, Key=key, Body=body, Metadata={"sha256": hashlib.sha256(body).hexdigest()})
    return key


def invoke(aws: EmbeddedAws, stack: DeployedStack, function: str, event: dict[str, Any], ok: bool = True) -> Any:
    """The deployed function's answer; ``ok=False``: it must have failed (its error body)."""
    reply = aws.client("lambda").invoke(FunctionName=stack.function_name(function), Payload=json.dumps(event))
    body = json.loads(reply["Payload"].read())
    assert bool(reply.get("FunctionError")) != ok, body
    return body


def publish(aws: EmbeddedAws, stack: DeployedStack, wheels: dict[str, tuple[bytes, bytes]]) -> dict[str, str]:
    """Wheels published, signed by the deployed Attest function, indexed by PublishIndex: their keys."""
    s3, bucket = aws.client("s3"), stack.outputs["WheelBucketName"]
    prefix = f"runs/{RUN}/jobs/j1/"
    manifest = {
        "job_id": "j1",
        "wheels": [{"name": f, "sha256": hashlib.sha256(b).hexdigest()} for f, (b, _) in wheels.items()],
        "sources": {"wf-signed": {"s3": f"s3://{bucket}/sources/wf-signed-0.tar.gz", "sha256": "ab" * 32}},
    }
    s3.put_object(Bucket=bucket, Key=f"{prefix}manifest.json", Body=json.dumps(manifest).encode())
    s3.put_object(Bucket=bucket, Key=f"runs/{RUN}/request.json", Body=b'{"framework": "extension"}')
    result = {"collect": {"published": sorted(wheels)}}
    s3.put_object(Bucket=bucket, Key=f"{prefix}result.json", Body=json.dumps(result).encode())
    keys = {f: put_wheel(s3, bucket, f, body, meta) for f, (body, meta) in wheels.items()}
    run = {"id": RUN, "bucket": bucket, "channel": CHANNEL, "layout": "per-cell"}
    execution = stack.state_machine_arn.replace(":stateMachine:", ":execution:") + f":{RUN}"
    attested = invoke(aws, stack, "AttestFunction", {"run": run, "jobs": [{"prefix": prefix}], "execution": execution})
    assert sorted(attested["signed"]) == sorted(wheels), attested
    invoke(aws, stack, "PublishIndexFunction", {"run": run})
    return keys


def wf(aws: EmbeddedAws, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([*args, "--endpoint-url", aws.endpoint])
    out, err = capsys.readouterr()
    return code, out, err


def pip_install(index: str, project: str, target: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "pip", "install", "--isolated", "--no-cache-dir", "--no-deps", "--target"]
    argv += [str(target), "--index-url", index, project]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


@pytest.fixture
def published(aws: EmbeddedAws, stack: DeployedStack) -> dict[str, Any]:
    good, evil = make_wheel("wf_signed_good", "VALUE = 1\n"), make_wheel("wf_signed_evil", "VALUE = 1\n")
    keys = publish(aws, stack, {good[0]: good[1:], evil[0]: evil[1:]})
    der = aws.client("kms").get_public_key(KeyId=stack.outputs["ProvenanceKeyArn"])["PublicKey"]
    return {"good": good[0], "evil": evil[0], "keys": keys, "pem": pem_of(der)}


def rewrite_consistently(aws: EmbeddedAws, stack: DeployedStack, filename: str) -> str:
    """The insider's change: other bytes under the same name, then the index made to agree with them."""
    s3, bucket = aws.client("s3"), stack.outputs["WheelBucketName"]
    name, body, metadata = make_wheel("wf_signed_evil", "VALUE = 2  # not what was built\n", "Summary: rewritten\n")
    assert name == filename
    put_wheel(s3, bucket, filename, body, metadata)  # its PEP 658 file is the new wheel's METADATA
    # The farm's PublishIndex refuses other bytes under a published name (PublishedNameReused) ...
    refused = invoke(aws, stack, "PublishIndexFunction", {"run": {"bucket": bucket, "channel": CHANNEL}}, ok=False)
    assert refused["errorType"] == "PublishedNameReused" and filename in refused["errorMessage"], refused
    # ... so the insider also drops the state that remembers the first bytes
    s3.delete_object(Bucket=bucket, Key=f"simple/{CHANNEL}/{STATE}")
    invoke(aws, stack, "PublishIndexFunction", {"run": {"bucket": bucket, "channel": CHANNEL}})
    page = s3.get_object(Bucket=bucket, Key=f"simple/{CHANNEL}/wf-signed-evil/")["Body"].read().decode()
    digest = hashlib.sha256(body).hexdigest()
    assert f"#sha256={digest}" in page  # the index now vouches for the new bytes
    assert f'data-core-metadata="sha256={hashlib.sha256(metadata).hexdigest()}"' in page
    return digest


def test_a_wheel_rewritten_with_its_index_is_refused_by_fetch_and_by_the_proxy(
    aws: EmbeddedAws,
    stack: DeployedStack,
    published: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    good, evil = published["good"], published["evil"]
    # Before: both verify and install.
    code, out, err = wf(aws, capsys, "fetch", CHANNEL, "--dest", str(tmp_path / "before"))
    assert code == 0, err
    assert [line.split()[-1] for line in out.splitlines() if line.startswith("wf_signed_")] == ["signed", "signed"]
    assert sorted(p.name for p in (tmp_path / "before").iterdir()) == sorted(
        [good, f"{good}{provenance.SUFFIX}", evil, f"{evil}{provenance.SUFFIX}"]
    )

    digest = rewrite_consistently(aws, stack, evil)

    dest = tmp_path / "after"
    code, _, err = wf(aws, capsys, "fetch", CHANNEL, "--dest", str(dest))
    assert code == 1
    refusal = next(line for line in err.splitlines() if line.startswith("REFUSED"))
    assert refusal.startswith(f"REFUSED {evil}: sha256:{digest} of this wheel is not the statement's subject"), err
    assert sorted(p.name for p in dest.iterdir()) == sorted([good, f"{good}{provenance.SUFFIX}"])  # nothing of evil
    # --no-verify says what it skips, and takes the index's word.
    code, _, err = wf(aws, capsys, "fetch", CHANNEL, "wf-signed-evil", "--no-verify", "--dest", str(tmp_path / "nv"))
    assert code == 0 and "--no-verify: signatures NOT checked" in err

    keys = Keyring((TrustedKey(published["pem"], "the stack's key"),))
    caplog.set_level(logging.WARNING, logger="wheelfoundry.publishing.index")
    with serving(aws.client("s3"), stack.outputs["WheelBucketName"], keys=keys) as base:
        index = f"{base}/simple/{CHANNEL}/"
        refused = pip_install(index, "wf-signed-evil", tmp_path / "t-evil")
        assert refused.returncode != 0, refused.stdout
        assert "403" in refused.stdout + refused.stderr
        assert not (tmp_path / "t-evil" / "wf_signed_evil").exists()
        installed = pip_install(index, "wf-signed-good", tmp_path / "t-good")
        assert installed.returncode == 0, installed.stdout + installed.stderr
        assert (tmp_path / "t-good" / "wf_signed_good" / "__init__.py").read_text() == "VALUE = 1\n"
        # pip resolves dependencies from the PEP 658 file before it downloads a wheel: one that is not the
        # signed wheel's METADATA (here: a dependency added) is refused too.
        s3, key = aws.client("s3"), published["keys"][good]
        meta = s3.get_object(Bucket=stack.outputs["WheelBucketName"], Key=f"{key}.metadata")["Body"].read()
        s3.put_object(Bucket=stack.outputs["WheelBucketName"], Key=f"{key}.metadata", Body=meta + b"Requires-Dist: x\n")
        with pytest.raises(urllib.error.HTTPError) as metadata_refused:
            urllib.request.urlopen(f"{base}/{key}.metadata")
        assert metadata_refused.value.code == 403
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("REFUSED")]
    assert any(f"{evil}" in m and "is not the statement's subject" in m for m in logged), logged
    # Without verification the proxy would have served it: the check above is what refused it.
    with serving(aws.client("s3"), stack.outputs["WheelBucketName"]) as base:
        assert pip_install(f"{base}/simple/{CHANNEL}/", "wf-signed-evil", tmp_path / "t-nv").returncode == 0


def test_an_envelope_re_signed_with_another_key_is_refused(
    aws: EmbeddedAws,
    stack: DeployedStack,
    published: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    s3, bucket = aws.client("s3"), stack.outputs["WheelBucketName"]
    good = published["good"]
    target = published["keys"][good] + provenance.SUFFIX
    farm_signed = json.loads(s3.get_object(Bucket=bucket, Key=target)["Body"].read())
    # securesystemslib on its own accepts the farm's envelope with the key KMS returns.
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import SSlibKey

    arn = stack.outputs["ProvenanceKeyArn"]
    assert farm_signed["signatures"][0]["keyid"] == arn
    kms_key = SSlibKey.from_crypto(serialization.load_pem_public_key(published["pem"]), keyid=arn)
    assert list(Envelope.from_dict(json.loads(json.dumps(farm_signed))).verify([kms_key], 1)) == [arn]

    # The same statement (same subject: the wheel is untouched) signed by another key, claiming the stack's keyid.
    other = ec.generate_private_key(ec.SECP256R1())
    stmt = json.loads(base64.b64decode(farm_signed["payload"]))
    forged = provenance.envelope(stmt, arn, lambda d: other.sign(d, ec.ECDSA(Prehashed(hashes.SHA256()))))
    s3.put_object(Bucket=bucket, Key=target, Body=json.dumps(forged).encode())

    dest = tmp_path / "dist"
    code, _, err = wf(aws, capsys, "fetch", CHANNEL, "wf-signed-good", "--dest", str(dest))
    assert code == 1
    assert f"REFUSED {good}: signature does not verify with any trusted key (signed by {arn}" in err
    assert list(dest.iterdir()) == []
    pem = tmp_path / "stack.pem"
    pem.write_bytes(published["pem"])
    code, out, _ = wf(aws, capsys, "verify", "--channel", CHANNEL, "--public-key", str(pem))
    assert code == 1 and f"FAIL {good}: signature does not verify" in out
    with serving(s3, bucket, keys=Keyring((TrustedKey(published["pem"], "stack"),))) as base:
        refused = pip_install(f"{base}/simple/{CHANNEL}/", "wf-signed-good", tmp_path / "t")
        assert refused.returncode != 0 and "403" in refused.stdout + refused.stderr
    # The command as a user runs it: the bucket and the key from the stack's outputs, the refusal in its log.
    key = published["keys"][good]
    argv = [str(Path(sys.executable).parent / "wheelfoundry"), "index", "serve", "--port", "0"]
    proc = subprocess.Popen([*argv, "--endpoint-url", aws.endpoint], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        match = re.search(rb"http://127\.0\.0\.1:\d+", proc.stdout.readline())
        assert match, "index serve did not print its address"
        with pytest.raises(urllib.error.HTTPError) as served:
            urllib.request.urlopen(f"{match.group(0).decode()}/{key}")
        assert served.value.code == 403
    finally:
        proc.terminate()
        _, log = proc.communicate(timeout=30)
    assert f"REFUSED {key}: signature does not verify with any trusted key".encode() in log, log
    # Trusting the other key (as after a key replacement, with --public-key naming both) accepts it again.
    other_pem = tmp_path / "other.pem"
    other_pem.write_bytes(
        other.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    argv = ["fetch", CHANNEL, "wf-signed-good", "--dest", str(dest), "--public-key", str(pem)]
    code, _, err = wf(aws, capsys, *argv, "--public-key", str(other_pem))
    assert code == 0, err
    assert (dest / good).is_file()
