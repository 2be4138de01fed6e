"""Serve the private bucket's index to pip on localhost, signing each read with your credentials, and
serving only wheels whose signed provenance verifies (or a public channel's site, wheelfoundry_user.public).

The bucket blocks public access, so pip cannot read it directly. This read-only proxy maps
``GET /simple/...`` and ``GET /wheels/...`` to S3 GetObject (``.../`` to ``.../index.html``) and
listens on 127.0.0.1 only:

    wheelfoundry index serve --bucket <WheelBucketName> &
    pip install --index-url http://127.0.0.1:8765/simple/release/ torch

A wheel (and its PEP 658 ``.metadata``) is served only after its bytes' sha256 is the subject of a
statement signed by a trusted key (wheelfoundry_user.trust); otherwise 403, with the reason in the
log. The index pages are not signed: their hashes only tell pip what to expect, and the bytes pip gets
are the verified ones. A verified wheel is remembered by its S3 version id (the bucket is versioned:
a rewrite is a new version, verified again) and later requests read exactly that version. Its
``.metadata`` is served only when it is the ``METADATA`` inside the verified wheel, since pip resolves
dependencies from it before it downloads the wheel.
"""

from __future__ import annotations

import hashlib
import io
import logging
import shutil
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urlsplit

from botocore.exceptions import ClientError

ALLOWED_PREFIXES = ("simple/", "wheels/")
CHUNK = 1 << 20
log = logging.getLogger("wheelfoundry.publishing.index")


def object_key(path: str) -> str | None:
    """The S3 key for a request path, or None when the path is outside the index."""
    key = unquote(urlsplit(path).path).lstrip("/")
    if not key.startswith(ALLOWED_PREFIXES) or ".." in key.split("/"):
        return None
    return key + "index.html" if key.endswith("/") else key


@dataclass(frozen=True)
class Verified:
    version: str  # the S3 version id (or ETag where the bucket is not versioned) whose bytes passed
    sha256: str
    metadata_sha256: str | None  # of the METADATA inside the wheel


class Refused(Exception):
    """The wheel may not be served; the message says why."""


def _inner_metadata(path: Path) -> str | None:
    try:
        with zipfile.ZipFile(path) as zf:
            name = next((n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")), None)
            return hashlib.sha256(zf.read(name)).hexdigest() if name else None
    except zipfile.BadZipFile:
        return None


class Gate:
    """Verifies wheels before they are served; thread-safe, verified versions cached in memory."""

    def __init__(self, s3: Any, bucket: str, keys: Any) -> None:
        self.s3, self.bucket, self.keys = s3, bucket, keys
        self._cache: dict[str, Verified] = {}
        self._lock = threading.Lock()

    def _pin(self, head: dict[str, Any]) -> dict[str, str]:
        version = head.get("VersionId")
        return {"VersionId": version} if version and version != "null" else {"IfMatch": head["ETag"]}

    def check(self, key: str) -> tuple[Verified, dict[str, str], Path | None]:
        """The wheel's verdict, the GetObject arguments that read exactly those bytes, and (first time
        only) a temporary file holding them. Raises Refused."""
        from wheelfoundry.publishing.provenance import SUFFIX
        from wheelfoundry_user.trust import check_digest

        head = self.s3.head_object(Bucket=self.bucket, Key=key)
        pin = self._pin(head)
        ident = next(iter(pin.values()))
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and cached.version == ident:
            return cached, pin, None
        spool = Path(tempfile.mkstemp(prefix="wf-index-", suffix=".whl")[1])
        try:
            digest = hashlib.sha256()
            with spool.open("wb") as out:
                body = self.s3.get_object(Bucket=self.bucket, Key=key, **pin)["Body"]
                for chunk in iter(lambda: body.read(CHUNK), b""):
                    digest.update(chunk)
                    out.write(chunk)
            try:
                envelope = self.s3.get_object(Bucket=self.bucket, Key=key + SUFFIX)["Body"].read()
            except ClientError:
                raise Refused(f"no provenance ({key}{SUFFIX} not in the bucket): unsigned") from None
            verdict = check_digest(key.rsplit("/", 1)[-1], digest.hexdigest(), envelope, self.keys)
            if not verdict.ok:
                raise Refused(verdict.reason)
            entry = Verified(ident, digest.hexdigest(), _inner_metadata(spool))
        except BaseException:
            spool.unlink(missing_ok=True)
            raise
        with self._lock:
            self._cache[key] = entry
        return entry, pin, spool


def make_handler(s3: Any, bucket: str, gate: Gate | None = None) -> type[BaseHTTPRequestHandler]:
    class IndexHandler(BaseHTTPRequestHandler):
        server_version = "wheelfoundry-index"

        def _refuse(self, key: str, reason: str) -> None:
            log.warning("REFUSED %s: %s", key, reason)
            self.send_error(403, "refused: signed provenance does not verify", reason)

        def _send(self, stream: IO[bytes], length: int, kind: str, body: bool) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(length))
            self.end_headers()
            if body:
                shutil.copyfileobj(stream, self.wfile, CHUNK)

        def _gated(self, key: str, body: bool) -> None:
            assert gate is not None
            wheel = key.removesuffix(".metadata")
            try:
                verified, pin, spool = gate.check(wheel)
            except Refused as exc:
                self._refuse(key, str(exc))
                return
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                self.send_error(404 if code in ("NoSuchKey", "404", "NotFound") else 502, code)
                return
            try:
                if key == wheel and spool is not None:
                    with spool.open("rb") as stream:
                        self._send(stream, spool.stat().st_size, "application/octet-stream", body)
                    return
                obj = s3.get_object(Bucket=bucket, Key=key, **(pin if key == wheel else {}))
                if key != wheel:  # the .metadata: only the METADATA of the verified wheel
                    data = obj["Body"].read()
                    if hashlib.sha256(data).hexdigest() != verified.metadata_sha256:
                        self._refuse(key, "this .metadata is not the METADATA inside the signed wheel")
                        return
                    self._send(io.BytesIO(data), len(data), "application/octet-stream", body)
                    return
                self._send(obj["Body"], obj["ContentLength"], "application/octet-stream", body)
            finally:
                if spool is not None:
                    spool.unlink(missing_ok=True)

        def _serve(self, body: bool) -> None:
            key = object_key(self.path)
            if key is None:
                self.send_error(404, "outside the index")
                return
            if gate is not None and key.startswith("wheels/") and key.endswith((".whl", ".whl.metadata")):
                self._gated(key, body)
                return
            try:
                obj = s3.get_object(Bucket=bucket, Key=key)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                self.send_error(404 if code in ("NoSuchKey", "404", "NotFound") else 502, code)
                return
            self._send(obj["Body"], obj["ContentLength"], obj.get("ContentType") or "application/octet-stream", body)
            obj["Body"].close()

        def do_GET(self) -> None:
            self._serve(body=True)

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def log_message(self, format: str, *args: Any) -> None:  # quiet: pip makes many requests
            return

    return IndexHandler


def make_server(s3: Any, bucket: str, port: int, keys: Any = None) -> ThreadingHTTPServer:
    """The proxy, bound to 127.0.0.1 only (port 0: any free one). ``keys``: a Keyring, None to serve unverified."""
    gate = Gate(s3, bucket, keys) if keys is not None else None
    return ThreadingHTTPServer(("127.0.0.1", port), make_handler(s3, bucket, gate))


@contextmanager
def serving(s3: Any, bucket: str, port: int = 0, keys: Any = None) -> Iterator[str]:
    """Run the proxy in a thread; yields its base URL (``http://127.0.0.1:<port>``)."""
    server = make_server(s3, bucket, port, keys)
    thread = threading.Thread(target=server.serve_forever, name="wheelfoundry-index", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def serve_forever(s3: Any, bucket: str, port: int, keys: Any = None, label: str | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    server = make_server(s3, bucket, port, keys)
    how = f"wheels verified against {keys.describe()}" if keys is not None else "wheels NOT verified (--no-verify)"
    where = label or f"s3://{bucket}/simple/"
    print(f"serving {where} at http://127.0.0.1:{server.server_address[1]}/simple/<channel>/", flush=True)
    print(how, flush=True)
    server.serve_forever()
