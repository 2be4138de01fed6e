"""A public channel's users: fetch, verify and index serve from its URL, with the key pinned by fingerprint.

The shipped stack in the embedded AWS with PublicChannels=ci, served by the local edge (the template's
distribution rules); a wheel signed by the stack's KMS key as Attest signs, published by publish_index
with the deployed PublishIndex function's environment. The commands get no AWS endpoint or credentials.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from wheelfoundry_cli.index_server import serving
from wheelfoundry_cli.main import main

from tests.helpers import http_get
from tests.test_provenance import BUILDER, MANIFEST, REQUEST, RUN
from wheelfoundry.errors import PublishedNameReused
from wheelfoundry.publishing import provenance
from wheelfoundry.publishing.edge import Edge
from wheelfoundry.publishing.index import STATE, publish_index
from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_local.edge import LocalEdge, serving_edge
from wheelfoundry_local.testing import aws, embedded_aws  # noqa: F401
from wheelfoundry_user import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_OK
from wheelfoundry_user.public import HttpOrigin, PublicIndex, pinned_keyring

ROOT = Path(__file__).resolve().parents[1]
WHEEL = "wf_tiny_ext-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
BODY = b"PK\x05\x06" + b"\0" * 18


@pytest.fixture
def site(aws: EmbeddedAws) -> Iterator[tuple[DeployedStack, LocalEdge, str]]:  # noqa: F811
    stack = aws.deploy(ROOT / "template.yaml", {"PublicChannels": "ci"})
    s3, bucket, arn = aws.client("s3"), stack.outputs["WheelBucketName"], stack.outputs["ProvenanceKeyArn"]
    key = f"wheels/ci/wf-tiny-ext/{WHEEL}"
    s3.put_object(Bucket=bucket, Key=key, Body=BODY, Metadata={"sha256": hashlib.sha256(BODY).hexdigest()})
    stmt = provenance.statement(
        {"filename": WHEEL, "sha256": hashlib.sha256(BODY).hexdigest()}, REQUEST, {"m": MANIFEST}, BUILDER, RUN
    )

    def sign(digest: bytes) -> bytes:  # as Attest signs: KMS Sign of the digest with the stack's key
        kms = aws.client("kms")
        return bytes(
            kms.sign(KeyId=arn, Message=digest, MessageType="DIGEST", SigningAlgorithm="ECDSA_SHA_256")["Signature"]
        )

    envelope = json.dumps(provenance.envelope(stmt, arn, sign)).encode()
    s3.put_object(Bucket=bucket, Key=key + provenance.SUFFIX, Body=envelope)
    env = aws.client("lambda").get_function_configuration(FunctionName=stack.function_name("PublishIndexFunction"))
    public = Edge.from_environ(env["Environment"]["Variables"])
    clients = {"cloudfront": aws.client("cloudfront"), "kms": aws.client("kms")}
    fingerprint = publish_index(s3, bucket, "ci", public=public, clients=clients)["edge"]["key_fingerprint"]
    with serving_edge(aws, stack) as edge:
        yield stack, edge, fingerprint


def wf(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def tamper(aws: EmbeddedAws, stack: DeployedStack) -> None:  # noqa: F811
    """Other bytes under the wheel's name, with the index's sha256 rewritten to match (a bucket writer could)."""
    s3, bucket = aws.client("s3"), stack.outputs["WheelBucketName"]
    evil = BODY + b"evil"
    key = f"wheels/ci/wf-tiny-ext/{WHEEL}"
    s3.put_object(Bucket=bucket, Key=key, Body=evil, Metadata={"sha256": hashlib.sha256(evil).hexdigest()})
    with pytest.raises(PublishedNameReused, match=f"{WHEEL}: channel 'ci' published it with sha256"):
        publish_index(s3, bucket, "ci")  # the farm never puts new bytes under a published name ...
    s3.delete_object(Bucket=bucket, Key=f"simple/ci/{STATE}")  # ... but a bucket writer can forget it did
    publish_index(s3, bucket, "ci")
    for invalidated in ("/simple/ci/*", f"/{key.replace('+', '%2B')}"):  # the pages as PublishIndex would
        aws.client("cloudfront").create_invalidation(
            DistributionId=stack.resources["EdgeDistribution"],
            InvalidationBatch={"Paths": {"Quantity": 1, "Items": [invalidated]}, "CallerReference": invalidated},
        )


def test_fetch_and_verify_from_the_public_url_with_a_pinned_key(
    aws: EmbeddedAws,  # noqa: F811
    site: tuple[DeployedStack, LocalEdge, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stack, edge, fingerprint = site
    index = f"{edge.url}/simple/ci/"
    code, out, err = wf(
        capsys, "fetch", index, "wf-tiny-ext", "--dest", str(tmp_path / "a"), "--key-fingerprint", fingerprint
    )
    assert code == EXIT_OK, err
    assert (tmp_path / "a" / WHEEL).read_bytes() == BODY and "signed" in out
    code, out, _ = wf(capsys, "verify", "--index-url", index, "--key-fingerprint", f"sha256:{fingerprint}")
    assert code == EXIT_OK and out.startswith(f"OK   {WHEEL}: signed provenance verified")

    code, _, err = wf(capsys, "fetch", index, "--dest", str(tmp_path / "b"))
    assert code == EXIT_FAILED and "--key-fingerprint" in err  # no pinned key: nothing is trusted by default
    other = hashlib.sha256(b"another key").hexdigest()
    code, _, err = wf(capsys, "verify", "--index-url", index, "--key-fingerprint", other)
    assert code == EXIT_NOT_FOUND and f"serves no key of the pinned fingerprint {other}" in err

    tamper(aws, stack)
    code, _, err = wf(capsys, "fetch", index, "--dest", str(tmp_path / "c"), "--key-fingerprint", fingerprint)
    assert code == EXIT_FAILED and f"REFUSED {WHEEL}" in err and "is not the statement's subject" in err
    assert list((tmp_path / "c").iterdir()) == []
    code, out, _ = wf(capsys, "verify", "--index-url", index, "--key-fingerprint", fingerprint)
    assert code == EXIT_FAILED and out.startswith(f"FAIL {WHEEL}")


def test_a_key_file_swapped_on_the_site_is_refused(
    aws: EmbeddedAws,  # noqa: F811
    site: tuple[DeployedStack, LocalEdge, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    stack, edge, fingerprint = site
    impostor = ec.generate_private_key(ec.SECP256R1()).public_key()
    pem = impostor.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    bucket = stack.outputs["WheelBucketName"]
    aws.client("s3").put_object(Bucket=bucket, Key=f"keys/{fingerprint}.pem", Body=pem)
    path = f"/keys/{fingerprint}.pem"
    aws.client("cloudfront").create_invalidation(
        DistributionId=stack.resources["EdgeDistribution"],
        InvalidationBatch={"Paths": {"Quantity": 1, "Items": [path]}, "CallerReference": "swap"},
    )
    code, _, err = wf(capsys, "verify", "--index-url", f"{edge.url}/simple/ci/", "--key-fingerprint", fingerprint)
    assert code == EXIT_FAILED and f"not the pinned {fingerprint}: refused" in err


def test_index_serve_of_a_public_url_passes_only_verified_wheels(
    aws: EmbeddedAws,  # noqa: F811
    site: tuple[DeployedStack, LocalEdge, str],
) -> None:
    stack, edge, fingerprint = site
    public = PublicIndex.parse(f"{edge.url}/simple/")
    keys = pinned_keyring(public, [fingerprint])
    wheel = f"/wheels/ci/wf-tiny-ext/{WHEEL}"
    with serving(HttpOrigin(public), "public", keys=keys) as base:
        status, _, page = http_get(f"{base}/simple/ci/wf-tiny-ext/")
        assert status == 200 and WHEEL.encode() in page
        status, _, body = http_get(base + wheel)
        assert (status, body) == (200, BODY)
    tamper(aws, stack)
    with serving(HttpOrigin(public), "public", keys=keys) as base:
        assert http_get(base + wheel)[0] == 403
