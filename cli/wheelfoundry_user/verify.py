"""`wheelfoundry verify` and `wheelfoundry public-key`: check a wheel against its signed provenance.

A wheel passes when (1) one signature of its DSSE envelope verifies with a trusted key
(wheelfoundry_user.trust: the stack's KMS key and the ones cached before it, or the PEM files named)
over DSSE's pre-authentication encoding of the statement, checked by securesystemslib; (2) the
wheel's own sha256 is the statement's subject, under the wheel's file name; (3) what the user expects
(``--source``, ``--builder``, ``--request``) is what the statement says was built. `fetch` and
`index serve` run the same checks (wheelfoundry_user.trust.check_digest) before a wheel reaches the user.
"""

from __future__ import annotations

import hashlib
import json
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheelfoundry.publishing.provenance import SUFFIX
from wheelfoundry_user import NotFound, trust
from wheelfoundry_user.farm import Farm, aws_problem
from wheelfoundry_user.trust import Keyring, Verdict, check_digest

if TYPE_CHECKING:
    from wheelfoundry_user.wheels import Store


def public_key_pem(farm: Farm) -> bytes:
    """The stack's provenance key as PEM (KMS GetPublicKey returns DER SubjectPublicKeyInfo)."""
    from botocore.exceptions import BotoCoreError, ClientError

    arn = farm.outputs.get("ProvenanceKeyArn")
    if not arn:
        raise NotFound(f"stack {farm.stack!r} has no ProvenanceKeyArn output (deployed before provenance signing)")
    try:
        der = farm.client("kms").get_public_key(KeyId=arn)["PublicKey"]
    except (ClientError, BotoCoreError) as exc:
        raise aws_problem(exc) from None
    return pem_of(der)


def pem_of(der: bytes) -> bytes:
    """KMS GetPublicKey's DER SubjectPublicKeyInfo as the PEM `--public-key` reads."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_der_public_key(der)
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def keyring(farm: Farm | None, public_keys: list[str]) -> Keyring:
    """The keys to trust: the PEM files named, else the stack's key from KMS and those cached before it."""
    if public_keys:
        return Keyring(trust.unique(trust.from_files(public_keys)))
    assert farm is not None
    pem = public_key_pem(farm)
    arn = farm.outputs["ProvenanceKeyArn"]
    trust.remember(farm.stack, arn, pem)
    current = trust.TrustedKey(pem, f"stack {farm.stack} key {arn}", arn)
    return Keyring(trust.unique([current, *trust.remembered(farm.stack, arn)]))


def check(
    filename: str,
    wheel: bytes,
    envelope: bytes,
    keys: Keyring,
    source: str | None = None,
    request: dict[str, Any] | None = None,
    builder: str | None = None,
) -> Verdict:
    """One wheel's bytes against its envelope."""
    return check_digest(filename, hashlib.sha256(wheel).hexdigest(), envelope, keys, source, request, builder)


def _fetch(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 - the user's own index or bucket URL
            return bytes(response.read())
    except OSError:
        return None


def targets(spec: str, provenance: str | None) -> list[tuple[str, bytes | None, bytes | None]]:
    """(file name, wheel bytes, envelope bytes) of a local wheel or a URL; the envelope beside it by default."""
    if spec.startswith(("http://", "https://")):
        name = spec.rsplit("/", 1)[-1].split("#", 1)[0]
        return [(name, _fetch(spec.split("#", 1)[0]), _fetch(provenance or spec.split("#", 1)[0] + SUFFIX))]
    path = Path(spec)
    if not path.is_file():
        raise NotFound(f"{spec}: no such wheel")
    beside = Path(provenance) if provenance else path.with_name(path.name + SUFFIX)
    return [(path.name, path.read_bytes(), beside.read_bytes() if beside.is_file() else None)]


def channel_targets(farm: Store, channel: str) -> list[tuple[str, bytes | None, bytes | None]]:
    from wheelfoundry_user.wheels import indexed

    return [(w.filename, farm.get(w.key), farm.get(w.key + SUFFIX)) for w in indexed(farm, channel)]


def verify_all(
    items: list[tuple[str, bytes | None, bytes | None]],
    keys: Keyring,
    source: str | None,
    request: Path | None,
    builder: str | None = None,
) -> list[Verdict]:
    expected = json.loads(request.read_text()) if request else None
    out = []
    for name, wheel, envelope in items:
        if wheel is None:
            out.append(Verdict(name, False, "the wheel could not be read"))
        elif envelope is None:
            out.append(Verdict(name, False, f"no provenance ({name}{SUFFIX} not found): unsigned"))
        else:
            out.append(check(name, wheel, envelope, keys, source, expected, builder))
    return out
