"""Serve the private bucket's index to pip on localhost, signing each read with your credentials.

The bucket blocks public access, so pip cannot read it directly. This read-only proxy maps
``GET /simple/...`` and ``GET /wheels/...`` to S3 GetObject (``.../`` to ``.../index.html``) and
listens on 127.0.0.1 only:

    wheelfoundry index serve --bucket <WheelBucketName> &
    pip install --index-url http://127.0.0.1:8765/simple/release/ torch
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from botocore.exceptions import ClientError

ALLOWED_PREFIXES = ("simple/", "wheels/")
CHUNK = 1 << 20


def object_key(path: str) -> str | None:
    """The S3 key for a request path, or None when the path is outside the index."""
    key = unquote(urlsplit(path).path).lstrip("/")
    if not key.startswith(ALLOWED_PREFIXES) or ".." in key.split("/"):
        return None
    return key + "index.html" if key.endswith("/") else key


def make_handler(s3: Any, bucket: str) -> type[BaseHTTPRequestHandler]:
    class IndexHandler(BaseHTTPRequestHandler):
        server_version = "wheelfoundry-index"

        def _serve(self, body: bool) -> None:
            key = object_key(self.path)
            if key is None:
                self.send_error(404, "outside the index")
                return
            try:
                obj = s3.get_object(Bucket=bucket, Key=key)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                self.send_error(404 if code in ("NoSuchKey", "404", "NotFound") else 502, code)
                return
            self.send_response(200)
            self.send_header("Content-Type", obj.get("ContentType") or "application/octet-stream")
            self.send_header("Content-Length", str(obj["ContentLength"]))
            self.end_headers()
            stream = obj["Body"]
            if body:
                for chunk in iter(lambda: stream.read(CHUNK), b""):
                    self.wfile.write(chunk)
            stream.close()

        def do_GET(self) -> None:
            self._serve(body=True)

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def log_message(self, format: str, *args: Any) -> None:  # quiet: pip makes many requests
            return

    return IndexHandler


def make_server(s3: Any, bucket: str, port: int) -> ThreadingHTTPServer:
    """The proxy, bound to 127.0.0.1 only (port 0: any free one)."""
    return ThreadingHTTPServer(("127.0.0.1", port), make_handler(s3, bucket))


@contextmanager
def serving(s3: Any, bucket: str, port: int = 0) -> Iterator[str]:
    """Run the proxy in a thread; yields its base URL (``http://127.0.0.1:<port>``)."""
    server = make_server(s3, bucket, port)
    thread = threading.Thread(target=server.serve_forever, name="wheelfoundry-index", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def serve_forever(s3: Any, bucket: str, port: int) -> None:
    server = make_server(s3, bucket, port)
    print(f"serving s3://{bucket}/simple/ at http://127.0.0.1:{server.server_address[1]}/simple/<channel>/", flush=True)
    server.serve_forever()
