"""A real package index on 127.0.0.1 for the publish tests (pypiserver, pinned in the dev dependencies),
with htpasswd users so a test sees the token reach the index; small real wheels and their signed provenance."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed

from tests.test_provenance import BUILDER, MANIFEST, REQUEST, RUN
from tests.tiny_wheels import pure_wheel
from wheelfoundry.publishing import provenance


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def pypiserver(root: Path, users: dict[str, str]) -> Iterator[str]:
    """Serve ``root/packages`` on 127.0.0.1; uploads need one of ``users``, downloads need nothing."""
    from passlib.apache import HtpasswdFile

    packages, htpasswd = root / "packages", root / "htpasswd"
    packages.mkdir(parents=True, exist_ok=True)
    users_file = HtpasswdFile(str(htpasswd), new=True)
    for user, password in users.items():
        users_file.set_password(user, password)
    users_file.save()
    port = free_port()
    argv = [sys.executable, "-m", "pypiserver", "run", "-i", "127.0.0.1", "-p", str(port)]
    argv += ["-a", "update", "-P", str(htpasswd), "--disable-fallback", str(packages)]
    log = (root / "pypiserver.log").open("w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/simple/", timeout=2).close()
                break
            except OSError:
                assert proc.poll() is None, (root / "pypiserver.log").read_text()
                assert time.monotonic() < deadline, "pypiserver did not come up"
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def tiny_wheel(dest: Path, project: str, version: str, code: str) -> Path:
    """A pure-Python wheel: one module named after the project, with its RECORD."""
    return pure_wheel(dest, project, version, code=code)


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def local_signer(key: ec.EllipticCurvePrivateKey) -> Any:
    def sign(digest: bytes) -> bytes:  # what KMS Sign with MessageType=DIGEST does
        return key.sign(digest, ec.ECDSA(Prehashed(hashes.SHA256())))

    return sign


def envelope_for(wheel: Path, sign: Any, key_id: str = "arn:aws:kms:us-east-1:1:key/k") -> bytes:
    """The DSSE envelope Attest would write for this wheel (provenance.statement/envelope)."""
    subject = {"filename": wheel.name, "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}
    stmt = provenance.statement(subject, REQUEST, {"runs/r1/jobs/j/manifest.json": MANIFEST}, BUILDER, RUN)
    return json.dumps(provenance.envelope(stmt, key_id, sign)).encode()
