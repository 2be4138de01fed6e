"""Which public keys a wheel's provenance may be signed by, and the DSSE check itself (securesystemslib).

Trusted keys come from three places, never from the wheel bucket (whoever can rewrite a wheel there can
write a key record too):

- the stack's current key: KMS GetPublicKey on its ``ProvenanceKeyArn`` output;
- the keys this machine got that way before, cached per stack and key ARN (``$WHEELFOUNDRY_CACHE``, else
  ``$XDG_CACHE_HOME/wheelfoundry``, else ``~/.cache/wheelfoundry``), so wheels signed before a key was
  replaced still verify here;
- PEM files the user names (``--public-key``, repeatable): an earlier key saved with ``public-key``.

An envelope's ``keyid`` is the KMS key ARN that signed it. DSSE calls it an unauthenticated hint: it
picks which keys to try first, it never makes a key trusted.

A wheel's verdict (check_digest) lives here too: `verify`, `fetch` (wheelfoundry_user.wheels) and
`index serve` all call it, and none of them owns the others.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wheelfoundry.errors import ProvenanceInvalid
from wheelfoundry.publishing.provenance import PAYLOAD_TYPE, open_envelope
from wheelfoundry_user import UserError

SCHEME = "ecdsa-sha2-nistp256"  # KMS ECC_NIST_P256 + ECDSA_SHA_256, as securesystemslib names it


@dataclass(frozen=True)
class TrustedKey:
    pem: bytes
    origin: str  # where it came from, for messages
    keyid: str | None = None  # the KMS key ARN, when known

    @property
    def fingerprint(self) -> str:
        """sha256 of the DER SubjectPublicKeyInfo: the same for the same key, whatever its PEM's spelling."""
        from cryptography.hazmat.primitives import serialization

        der = self.public().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        return hashlib.sha256(der).hexdigest()

    def public(self) -> Any:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        try:
            key = serialization.load_pem_public_key(self.pem)
        except ValueError as exc:
            raise UserError(f"{self.origin}: not a PEM public key ({exc})") from None
        if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
            raise UserError(f"{self.origin}: not an ECC_NIST_P256 (secp256r1) public key")
        return key


@dataclass(frozen=True)
class Keyring:
    keys: tuple[TrustedKey, ...]

    def __post_init__(self) -> None:
        for key in self.keys:
            key.public()  # a bad PEM is refused before any wheel is looked at

    def describe(self) -> str:
        return ", ".join(f"{k.origin} ({k.fingerprint[:12]})" for k in self.keys) or "no key"

    def _ordered(self, keyid: str) -> list[TrustedKey]:
        """Keys recorded under this keyid first, then the rest (a keyid is a hint, not a credential)."""
        return sorted(self.keys, key=lambda k: k.keyid != keyid)

    def verify(self, data: bytes) -> tuple[bytes, TrustedKey]:
        """The envelope's payload and the trusted key one of its signatures verifies with.

        Raises ProvenanceInvalid for an envelope that is not one (or not of our payload type), and
        Unverified when no signature verifies with any trusted key.
        """
        try:
            from securesystemslib.dsse import Envelope
            from securesystemslib.exceptions import UnverifiedSignatureError, VerificationError
            from securesystemslib.signer import SSlibKey  # type: ignore[attr-defined]  # public, no __all__
        except ImportError:
            raise UserError("checking provenance needs securesystemslib: pip install 'wheelfoundry[cli]'") from None

        try:
            raw = json.loads(data)
            envelope = Envelope.from_dict(copy.deepcopy(raw))  # from_dict rewrites the dict it is given
        except (ValueError, KeyError, TypeError) as exc:
            raise ProvenanceInvalid(f"not a DSSE envelope: {exc}") from exc
        if envelope.payload_type != PAYLOAD_TYPE:
            raise ProvenanceInvalid(f"payloadType is {envelope.payload_type!r}, not {PAYLOAD_TYPE!r}")
        for keyid in envelope.signatures:
            for key in self._ordered(keyid):
                candidate = SSlibKey.from_crypto(key.public(), keyid=keyid, scheme=SCHEME)
                try:
                    envelope.verify([candidate], 1)
                except (UnverifiedSignatureError, VerificationError):
                    continue
                return envelope.payload, key
        signers = ", ".join(envelope.signatures) or "none"
        raise Unverified(
            f"signature does not verify with any trusted key (signed by {signers}; trusted: {self.describe()})"
        )


class Unverified(Exception):
    """No signature of the envelope verifies with a trusted key."""


def cache_dir() -> Path:
    root = os.environ.get("WHEELFOUNDRY_CACHE") or os.environ.get("XDG_CACHE_HOME")
    base = Path(root) if root else Path.home() / ".cache"
    return (base if os.environ.get("WHEELFOUNDRY_CACHE") else base / "wheelfoundry") / "provenance-keys"


def _folder(stack: str, arn: str) -> Path:
    # The account and region come from the key's ARN: one stack name in two accounts is two stacks.
    parts = arn.split(":")
    where = f"{parts[4]}-{parts[3]}" if len(parts) > 5 else "unknown"
    return cache_dir() / f"{stack}@{where}"


def remember(stack: str, arn: str, pem: bytes) -> None:
    """Keep a key KMS returned for this stack, so what it signed still verifies after a replacement."""
    folder = _folder(stack, arn)
    folder.mkdir(parents=True, exist_ok=True)
    record = folder / f"{hashlib.sha256(arn.encode()).hexdigest()[:24]}.json"
    record.write_text(json.dumps({"keyid": arn, "public_key_pem": pem.decode()}, indent=1))


def remembered(stack: str, arn: str) -> list[TrustedKey]:
    """The keys cached for this stack (this ARN's account and region), the current one included."""
    found = []
    for path in sorted(_folder(stack, arn).glob("*.json")):
        try:
            record = json.loads(path.read_text())
            found.append(
                TrustedKey(record["public_key_pem"].encode(), f"cached key {record['keyid']}", record["keyid"])
            )
        except (OSError, ValueError, KeyError):
            continue  # a damaged cache entry is no key, not a crash
    return found


def from_files(paths: Iterable[str]) -> list[TrustedKey]:
    out = []
    for path in paths:
        try:
            pem = Path(path).read_bytes()
        except OSError as exc:
            raise UserError(f"--public-key {path}: {exc.strerror}") from None
        out.append(TrustedKey(pem, f"--public-key {path}"))
    return out


def unique(keys: Iterable[TrustedKey]) -> tuple[TrustedKey, ...]:
    """One entry per key (by fingerprint), the first named kept."""
    seen: dict[str, TrustedKey] = {}
    for key in keys:
        seen.setdefault(key.fingerprint, key)
    return tuple(seen.values())


def add_trust_flags(parser: Any, expectations: bool = True, no_verify: bool = True) -> None:
    """--public-key (and --source/--builder, --no-verify) for the commands that check provenance."""
    parser.add_argument(
        "--public-key",
        action="append",
        metavar="PEM",
        help="trust this key (repeatable: earlier keys too) instead of the stack's from KMS; works offline",
    )
    parser.add_argument(
        "--key-fingerprint",
        action="append",
        metavar="SHA256",
        help="a public index: trust the key it serves at keys/SHA256.pem, only if its fingerprint is this (repeatable)",
    )
    if expectations:
        parser.add_argument("--source", help="refuse unless the statement's source has this URI, sha256 or commit")
        parser.add_argument(
            "--builder", help="refuse unless the statement's builder id is this (<stack>:<state machine>)"
        )
    if no_verify:
        parser.add_argument("--no-verify", action="store_true", help="do not check signed provenance (say so)")


@dataclass(frozen=True)
class Verdict:
    filename: str
    ok: bool
    reason: str

    def line(self) -> str:
        return f"{'OK  ' if self.ok else 'FAIL'} {self.filename}: {self.reason}"


def _sources(stmt: dict[str, Any]) -> list[dict[str, Any]]:
    deps = stmt["predicate"]["buildDefinition"].get("resolvedDependencies") or []
    return [d for d in deps if d.get("name") not in ("job-manifest", "builder-image")]


def check_digest(
    filename: str,
    digest: str,
    envelope: bytes,
    keys: Keyring,
    source: str | None = None,
    request: dict[str, Any] | None = None,
    builder: str | None = None,
) -> Verdict:
    """A wheel of this sha256 against its envelope; the reason names the first check that failed."""
    try:
        open_envelope(envelope)  # the shape: a DSSE envelope around an in-toto SLSA statement
        payload, signer = keys.verify(envelope)
    except ProvenanceInvalid as exc:
        return Verdict(filename, False, f"provenance unreadable: {exc}")
    except Unverified as exc:
        return Verdict(filename, False, str(exc))
    stmt = json.loads(payload)  # the bytes the signature covers, not a second decoding of the file
    subjects = {s.get("name"): (s.get("digest") or {}).get("sha256") for s in stmt.get("subject", [])}
    if subjects.get(filename) != digest:
        named = ", ".join(f"{n} sha256:{d}" for n, d in subjects.items())
        return Verdict(filename, False, f"sha256:{digest} of this wheel is not the statement's subject ({named})")
    sources = _sources(stmt)
    if source is not None and not any(source in (d.get("uri"), *(d.get("digest") or {}).values()) for d in sources):
        named = ", ".join(str(d.get("uri")) for d in sources) or "none"
        return Verdict(filename, False, f"source {source} is not what was built (the statement names {named})")
    built = stmt["predicate"]["buildDefinition"].get("externalParameters", {}).get("request")
    if request is not None and built != request:
        fields = sorted(k for k in {*request, *(built or {})} if request.get(k) != (built or {}).get(k))
        return Verdict(filename, False, f"request differs from the one built in: {', '.join(fields)}")
    run = stmt["predicate"]["runDetails"]
    if builder is not None and run["builder"]["id"] != builder:
        return Verdict(filename, False, f"built by {run['builder']['id']}, not by the expected builder {builder}")
    where = ", ".join(f"{d.get('uri')}" for d in sources)
    return Verdict(
        filename,
        True,
        f"signed provenance verified: sha256:{digest[:16]}..., key {signer.fingerprint[:12]}, built by "
        f"{run['builder']['id']}, run {run['metadata']['invocationId'].rsplit(':', 1)[-1]}, source {where}",
    )
