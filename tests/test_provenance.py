"""Signed provenance without AWS: the statement, the DSSE envelope, `wheelfoundry verify`'s checks,
the index's link and the provenance key's policy (only the publishing function may sign)."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any, cast

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed

from tests.helpers import resources
from wheelfoundry.aws.attest import state_machine_arn
from wheelfoundry.publishing import provenance
from wheelfoundry.publishing.index import IndexFile, render_project
from wheelfoundry_local.iam_policy import Request, decide
from wheelfoundry_user.trust import Keyring, TrustedKey
from wheelfoundry_user.verify import check, keyring

WHEEL = b"PK\x03\x04 not really a wheel, but bytes with a sha256" * 20
NAME = "wf_example_ops-0.1.0-cp311-cp311-manylinux_2_34_x86_64.whl"
SOURCE = "s3://bucket/sources/wf-example-ops-8c4eaed609ff.tar.gz"
REQUEST = {"framework": "extension", "name": "wf-example-ops", "torch": ["2.13"], "source": {"s3": SOURCE}}
MANIFEST = {
    "job_id": "wf-example-ops-cpu-x86_64",
    "sources": {"wf-example-ops": {"s3": SOURCE, "sha256": "ab" * 32}},
    "builder": {"mode": "docker", "image": "123.dkr.ecr/wf:x86_64-cpu-1a2b", "digest": "sha256:" + "cd" * 32},
    "toolchain": {"gcc": "gcc 12.2.0"},
}
BUILDER = {"stack": "wheelfoundry", "state_machine": "arn:aws:states:us-east-1:1:stateMachine:wheelfoundry-build"}
RUN = {
    "id": "r1",
    "channel": "demo",
    "layout": "merged",
    "execution": "arn:aws:states:us-east-1:1:execution:wheelfoundry-build:r1",
}


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _signed(key: ec.EllipticCurvePrivateKey, wheel: bytes = WHEEL) -> bytes:
    subject = {"filename": NAME, "sha256": hashlib.sha256(wheel).hexdigest()}
    stmt = provenance.statement(subject, REQUEST, {"runs/r1/jobs/j/manifest.json": MANIFEST}, BUILDER, RUN)

    def sign(digest: bytes) -> bytes:  # what KMS Sign with MessageType=DIGEST does
        return key.sign(digest, ec.ECDSA(Prehashed(hashes.SHA256())))

    return json.dumps(provenance.envelope(stmt, "arn:aws:kms:us-east-1:1:key/k", sign)).encode()


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _public(*keys: ec.EllipticCurvePrivateKey) -> Keyring:
    return Keyring(tuple(TrustedKey(_pem(k), f"test key {i}") for i, k in enumerate(keys)))


def test_the_statement_is_in_toto_v1_with_slsa_v1_provenance() -> None:
    stmt = json.loads(base64.b64decode(json.loads(_signed(_key()))["payload"]))
    assert stmt["_type"] == "https://in-toto.io/Statement/v1"
    assert stmt["predicateType"] == "https://slsa.dev/provenance/v1"
    assert stmt["subject"] == [{"name": NAME, "digest": {"sha256": hashlib.sha256(WHEEL).hexdigest()}}]
    definition = stmt["predicate"]["buildDefinition"]
    assert definition["externalParameters"] == {"request": REQUEST}
    deps = {d["name"]: d for d in definition["resolvedDependencies"]}
    assert deps["wf-example-ops"] == {"name": "wf-example-ops", "uri": SOURCE, "digest": {"sha256": "ab" * 32}}
    assert deps["builder-image"]["digest"] == {"sha256": "cd" * 32}
    manifest_digest = hashlib.sha256(json.dumps(MANIFEST, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert deps["job-manifest"]["digest"] == {"sha256": manifest_digest}
    details = stmt["predicate"]["runDetails"]
    assert details["builder"]["id"] == f"wheelfoundry:{BUILDER['state_machine']}"
    assert details["metadata"]["invocationId"] == RUN["execution"]


def test_a_cuda_jobs_toolkit_lock_is_a_dependency_by_the_digest_of_its_bytes() -> None:
    toolkit = {"cuda": "13.2", "platform": "x86_64", "release": "13.2.2", "lock_sha256": "ef" * 32}
    cuda_job = {**MANIFEST, "toolchain": {"cuda_toolkit": toolkit}, "run": {"bucket": "wf-bucket"}}
    key = "toolkits/cuda-13.2-x86_64-0123456789abcdef.toml"
    watcher = {**cuda_job, "toolkit_lock": {"key": key, "sha256": "ef" * 32}}

    def lock_of(manifest: dict[str, Any]) -> list[dict[str, Any]]:
        stmt = provenance.statement({"filename": NAME, "sha256": "00" * 32}, REQUEST, {"m": manifest}, BUILDER, RUN)
        deps = stmt["predicate"]["buildDefinition"]["resolvedDependencies"]
        return [d for d in deps if d["name"] == "cuda-toolkit-lock"]

    assert lock_of(watcher) == [
        {"name": "cuda-toolkit-lock", "uri": f"s3://wf-bucket/{key}", "digest": {"sha256": "ef" * 32}}
    ]
    (bundled,) = lock_of(cuda_job)
    assert bundled["uri"] == "bundle:images/scripts/cuda/cuda-13.2-x86_64.toml" and bundled["digest"] == {
        "sha256": "ef" * 32
    }
    assert lock_of(MANIFEST) == []  # a CPU job installs no toolkit


def test_a_job_that_fetched_no_source_adds_no_source_dependency() -> None:
    # a test job's manifest names the package (its contract's pin) but holds no fetched archive or commit
    tested = {"job_id": "wf-example-ops-test-cp311-x86_64", "sources": {"wf-example-ops": {"repo": SOURCE, "ref": ""}}}
    manifests = {"runs/r1/jobs/j/manifest.json": MANIFEST, "runs/r1/jobs/t/manifest.json": tested}
    stmt = provenance.statement({"filename": NAME, "sha256": "00" * 32}, REQUEST, manifests, BUILDER, RUN)
    deps = stmt["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert [d for d in deps if d["name"] == "wf-example-ops"] == [
        {"name": "wf-example-ops", "uri": SOURCE, "digest": {"sha256": "ab" * 32}}
    ]


def test_the_cells_a_test_job_passed_the_published_bytes_in_are_a_byproduct() -> None:
    # the test job's manifest lists each wheel it tested with the cells its test passed in (its smoke record)
    cells = ["torch2.10.0-cp311-cpu-x86_64", "torch2.11.0-cp311-cpu-x86_64"]
    wheels = [{"name": NAME, "smoke": "passed", "tested_cells": cells}, {"name": "other.whl", "tested_cells": ["x"]}]
    tested = {"job_id": "wf-example-ops-test-cp311-x86_64", "kind": "test", "wheels": wheels}
    manifests = {"runs/r1/jobs/j/manifest.json": MANIFEST, "runs/r1/jobs/t/manifest.json": tested}
    stmt = provenance.statement({"filename": NAME, "sha256": "00" * 32}, REQUEST, manifests, BUILDER, RUN)
    (found,) = [b for b in stmt["predicate"]["runDetails"]["byproducts"] if b["name"] == "tested_in"]
    assert json.loads(base64.b64decode(found["content"])) == {"wf-example-ops-test-cp311-x86_64": cells}
    alone = provenance.statement({"filename": "third.whl", "sha256": "00" * 32}, REQUEST, manifests, BUILDER, RUN)
    assert "tested_in" not in [b["name"] for b in alone["predicate"]["runDetails"]["byproducts"]]


def test_a_good_signature_passes() -> None:
    key = _key()
    verdict = check(NAME, WHEEL, _signed(key), _public(key), source=SOURCE, request=REQUEST)
    assert verdict.ok, verdict.reason
    assert verdict.line().startswith(f"OK   {NAME}: signed provenance verified") and SOURCE in verdict.reason


def test_one_byte_changed_in_the_wheel_fails() -> None:
    key = _key()
    tampered = bytearray(WHEEL)
    tampered[100] ^= 1
    verdict = check(NAME, bytes(tampered), _signed(key), _public(key))
    assert not verdict.ok
    assert (
        f"sha256:{hashlib.sha256(tampered).hexdigest()} of this wheel is not the statement's subject" in verdict.reason
    )


def test_one_field_changed_in_the_statement_fails() -> None:
    key = _key()
    envelope = json.loads(_signed(key))
    stmt = json.loads(base64.b64decode(envelope["payload"]))
    stmt["predicate"]["buildDefinition"]["externalParameters"]["request"]["torch"] = ["2.14"]
    envelope["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
    verdict = check(NAME, WHEEL, json.dumps(envelope).encode(), _public(key))
    assert not verdict.ok and verdict.reason.startswith("signature does not verify with any trusted key")


def test_a_wrong_key_fails() -> None:
    verdict = check(NAME, WHEEL, _signed(_key()), _public(_key()))
    assert not verdict.ok and verdict.reason.startswith("signature does not verify with any trusted key")
    assert "signed by arn:aws:kms:us-east-1:1:key/k" in verdict.reason


def test_an_earlier_key_still_verifies_when_it_is_trusted_too() -> None:
    old, new = _key(), _key()
    envelope = _signed(old)
    assert not check(NAME, WHEEL, envelope, _public(new)).ok
    verdict = check(NAME, WHEEL, envelope, _public(new, old))
    assert verdict.ok, verdict.reason
    assert f"key {TrustedKey(_pem(old), 'old').fingerprint[:12]}" in verdict.reason


class _Stack:
    """What keyring() reads of a deployed stack: its key ARN output and KMS GetPublicKey."""

    def __init__(self, name: str, arn: str, key: ec.EllipticCurvePrivateKey) -> None:
        self.stack, self.outputs = name, {"ProvenanceKeyArn": arn}
        self.der = key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def client(self, service: str) -> Any:
        assert service == "kms"
        return self

    def get_public_key(self, KeyId: str) -> dict[str, bytes]:  # boto3 spells it KeyId
        assert KeyId == self.outputs["ProvenanceKeyArn"]
        return {"PublicKey": self.der}


def test_a_key_seen_before_the_stack_replaced_it_still_verifies_what_it_signed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("WHEELFOUNDRY_CACHE", str(tmp_path))
    old, new = _key(), _key()
    envelope = _signed(old)
    before = keyring(cast(Any, _Stack("wheelfoundry", "arn:aws:kms:us-east-1:1:key/old", old)), [])
    assert check(NAME, WHEEL, envelope, before).ok
    after = keyring(cast(Any, _Stack("wheelfoundry", "arn:aws:kms:us-east-1:1:key/new", new)), [])
    assert len(after.keys) == 2 and check(NAME, WHEEL, envelope, after).ok  # the cached one still counts
    # Another stack (or the same name in another account) has its own cache: the old key is not its.
    for other in (
        _Stack("other", "arn:aws:kms:us-east-1:1:key/new", new),
        _Stack("wheelfoundry", "arn:aws:kms:us-east-1:2:key/new", new),
    ):
        assert not check(NAME, WHEEL, envelope, keyring(cast(Any, other), [])).ok
    # --public-key replaces the stack's keys: only the files named are trusted.
    pem = tmp_path / "new.pem"
    pem.write_bytes(_pem(new))
    assert not check(NAME, WHEEL, envelope, keyring(None, [str(pem)])).ok


def test_an_unexpected_builder_fails() -> None:
    key = _key()
    verdict = check(NAME, WHEEL, _signed(key), _public(key), builder="other-stack:arn:aws:states:x")
    assert not verdict.ok and verdict.reason.startswith("built by wheelfoundry:arn:aws:states:us-east-1:1:stateMachine")
    expected = f"wheelfoundry:{BUILDER['state_machine']}"
    assert check(NAME, WHEEL, _signed(key), _public(key), builder=expected).ok


def test_securesystemslib_verifies_a_farm_signed_envelope_on_its_own() -> None:
    """The envelope Attest writes (KMS-style DIGEST signing) is plain DSSE: the library's own Envelope
    and SSlibKey check it with no code of ours, and refuse it after one payload byte changes."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError
    from securesystemslib.signer import SSlibKey

    key = _key()
    raw = json.loads(_signed(key))
    public = SSlibKey.from_crypto(key.public_key(), keyid="arn:aws:kms:us-east-1:1:key/k")
    assert public.scheme == "ecdsa-sha2-nistp256"
    envelope = Envelope.from_dict(json.loads(json.dumps(raw)))
    assert envelope.payload_type == "application/vnd.in-toto+json"
    assert set(envelope.verify([public], 1)) == {"arn:aws:kms:us-east-1:1:key/k"}
    payload = bytearray(envelope.payload)
    payload[10] ^= 1
    envelope.payload = bytes(payload)
    with pytest.raises(VerificationError):
        envelope.verify([public], 1)


@pytest.mark.parametrize(
    ("source", "request_", "reason"),
    [
        (
            "s3://bucket/sources/other-1234.tar.gz",
            None,
            "source s3://bucket/sources/other-1234.tar.gz is not what was built",
        ),
        (None, {**REQUEST, "torch": ["2.14"]}, "request differs from the one built in: torch"),
    ],
)
def test_expectations_about_source_and_request_are_checked(
    source: str | None, request_: dict[str, Any] | None, reason: str
) -> None:
    key = _key()
    verdict = check(NAME, WHEEL, _signed(key), _public(key), source=source, request=request_)
    assert not verdict.ok and verdict.reason.startswith(reason)


def test_an_envelope_of_another_type_is_refused() -> None:
    key = _key()
    envelope = json.loads(_signed(key))
    envelope["payloadType"] = "text/plain"
    verdict = check(NAME, WHEEL, json.dumps(envelope).encode(), _public(key))
    assert not verdict.ok and "payloadType is 'text/plain'" in verdict.reason


def test_the_builder_is_the_state_machine_of_the_execution() -> None:
    arn = "arn:aws:states:eu-west-1:123:execution:wheelfoundry-build:run-1"
    assert state_machine_arn(arn) == "arn:aws:states:eu-west-1:123:stateMachine:wheelfoundry-build"


def test_the_index_links_a_signed_wheel_to_its_provenance() -> None:
    page = render_project("demo", "wf-example-ops", [IndexFile(NAME, "ab" * 32, None, None, True)])
    assert f'data-wf-provenance="../../../wheels/demo/wf-example-ops/{NAME}.provenance.json"' in page
    unsigned = render_project("demo", "wf-example-ops", [IndexFile(NAME, "ab" * 32, None, None)])
    assert "provenance" not in unsigned


ATTEST_ROLE = "arn:aws:iam::123456789012:role/wheelfoundry-AttestFunctionRole-ABC"
KEY = "arn:aws:kms:us-east-1:123456789012:key/1234"


def _key_policy_decision(principal: str, action: str) -> str:
    """The provenance key's policy for one principal (its Principal elements resolved as deployed)."""
    policy = resources()["ProvenanceKey"]["Properties"]["KeyPolicy"]
    resolved = json.loads(
        json.dumps(policy)
        .replace('{"Fn::GetAtt": ["AttestFunctionRole", "Arn"]}', json.dumps(ATTEST_ROLE))
        .replace('{"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}', '"ACCOUNT"')
    )
    applies = [
        s
        for s in resolved["Statement"]
        if s["Principal"]["AWS"] in ("*", principal) or (s["Principal"]["AWS"] == "ACCOUNT" and principal != "ANON")
    ]
    return decide(Request(action, KEY, {"aws:PrincipalArn": principal}), [{"Statement": applies}])


def test_only_the_publishing_function_may_sign_with_the_provenance_key() -> None:
    key = resources()["ProvenanceKey"]["Properties"]
    assert (key["KeySpec"], key["KeyUsage"]) == ("ECC_NIST_P256", "SIGN_VERIFY")
    assert _key_policy_decision(ATTEST_ROLE, "kms:Sign") == "Allow"
    admin = "arn:aws:iam::123456789012:role/Admin"
    assert _key_policy_decision(admin, "kms:Sign") == "ExplicitDeny"  # even with an IAM policy granting it
    assert (
        _key_policy_decision("arn:aws:iam::123456789012:role/wheelfoundry-CollectFunctionRole-X", "kms:Sign") != "Allow"
    )
    assert _key_policy_decision(admin, "kms:GetPublicKey") == "Allow"
    assert _key_policy_decision(admin, "kms:Verify") == "Allow"
    assert _key_policy_decision(admin, "kms:PutKeyPolicy") == "Allow"  # administration, as KMS requires
