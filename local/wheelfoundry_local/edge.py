"""The public channels' CloudFront distribution, played on 127.0.0.1 for anyone, with no credentials.

What it serves and refuses comes from the deployed stack (edge_rules): the template's cache behaviours,
its viewer-request and viewer-response functions, its custom error responses (status, page and caching
TTL) and the bucket policy's grant to the distribution. Responses are cached for as long as each object's
Cache-Control says (the managed CachingOptimized rules), and the distribution's invalidations
(PublishIndex's CreateInvalidation, recorded by moto) drop them, so a test sees what a user behind a real
edge would: a stale page until the publish invalidates it. CloudFront's guide asks, when a viewer-request
function changes the URI, for both the viewer's URI and the changed one to be invalidated, and compares
paths case-sensitively: so here a response is cached under both, literally (``%2b`` is not ``%2B``), and
only an invalidation that covers both drops it. Plain HTTP on loopback (the real one redirects to HTTPS).

    with serving_edge(aws, stack) as edge:
        pip install --index-url {edge.url}/simple/demo/ NAME
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import ClientError

from . import cfn_edge, edge_rules
from ._moto import cloudfront_backend

XML = b'<?xml version="1.0" encoding="UTF-8"?>\n'
DENIED = XML + b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
NOT_FOUND = XML + b"<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>"
METHOD = b"This distribution is not configured to allow the HTTP request method\n"
PASSED = ("content-type", "content-length", "etag", "cache-control", "last-modified")


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    expires: float = 0.0  # time.monotonic() until which the edge keeps it
    stored: float = field(default_factory=time.monotonic)


def _covers(path: str, uri: str) -> bool:
    """Whether an invalidation path names this URI (a trailing * is the only wildcard CloudFront has)."""
    return uri == path or (path.endswith("*") and uri.startswith(path[:-1]))


class LocalEdge:
    def __init__(self, distribution: cfn_edge.DeployedDistribution, s3: Any) -> None:
        self.distribution = distribution
        self.rules = edge_rules.Rules.of(distribution.config)
        self.s3 = s3
        self._cache: dict[tuple[str, str], Response] = {}  # (viewer URI, the function's URI) -> response
        self._applied: set[str] = set()
        self._lock = threading.Lock()
        self.log: list[tuple[str, str, int, str]] = []  # method, path, status, x-cache
        self._server: ThreadingHTTPServer | None = None

    @property
    def public_url(self) -> str:
        return f"https://{self.distribution.domain_name}"

    @property
    def url(self) -> str:
        assert self._server is not None, "the edge is not serving"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def local(self, public: str) -> str:
        """A URL of the distribution (the stack's outputs) as this edge serves it."""
        return public.replace(self.public_url, self.url, 1)

    # -- one request ------------------------------------------------------------------------------
    def handle(self, method: str, path: str, headers: dict[str, str]) -> Response:
        uri = viewer_uri = urlsplit(path).path or "/"
        behavior = self.rules.behavior(uri)
        if method not in behavior.methods:
            return Response(403, {"Content-Type": "text/plain"}, METHOD)
        if behavior.viewer_request is not None:
            code = cfn_edge.function_code(behavior.viewer_request)
            answer = edge_rules.viewer_request(code, method, uri, headers, self.distribution.id)
            if "statusCode" in answer:
                own = {k: v["value"] for k, v in (answer.get("headers") or {}).items()}
                return Response(int(answer["statusCode"]), own, str(answer.get("body") or "").encode())
            uri = answer["uri"]
        self._apply_invalidations()
        key = (viewer_uri, uri)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and cached.expires > time.monotonic():
            out = self._out(cached, behavior, "Hit", int(time.monotonic() - cached.stored))
        else:
            fresh = self._fetch(behavior, uri)
            with self._lock:
                self._cache[key] = fresh
            out = self._out(fresh, behavior, "Miss" if fresh.status < 400 else "Error", 0)
        if behavior.viewer_response is None or out.status >= 400:  # CloudFront runs none on an error
            return out
        code = cfn_edge.function_code(behavior.viewer_response)
        request = (method, viewer_uri, headers)
        status, own = edge_rules.viewer_response(code, request, out.status, out.headers, self.distribution.id)
        return Response(status, own, out.body, out.expires, out.stored)

    def _out(self, r: Response, behavior: edge_rules.Behavior, how: str, age: int) -> Response:
        headers = {**r.headers, **behavior.headers, "X-Cache": f"{how} from cloudfront", "Age": str(age)}
        return Response(r.status, headers, r.body, r.expires, r.stored)

    def _fetch(self, behavior: edge_rules.Behavior, uri: str) -> Response:
        """The origin's answer, or the distribution's custom error response in place of its error."""
        answer = self._origin(behavior, uri)
        custom = self.rules.errors.get(answer.status)
        if answer.status < 400 or custom is None or custom.page is None or custom.response_code is None:
            return answer
        # The page comes through the behaviour its path matches; when it cannot be read the viewer gets the
        # status CloudFront got for the page (CloudFront Developer Guide, "Generate custom error responses").
        page = self._origin(self.rules.behavior(custom.page), custom.page)
        if page.status >= 400:
            return page
        headers = {k: v for k, v in page.headers.items() if k in ("Content-Type", "Content-Length")}
        return Response(custom.response_code, headers, page.body, answer.expires, answer.stored)

    def _origin(self, behavior: edge_rules.Behavior, uri: str) -> Response:
        bucket = self.rules.buckets[behavior.origin]
        key = edge_rules.object_key(uri)
        policy = cfn_edge.bucket_policy(bucket)
        arn = self.distribution.arn
        now = time.monotonic()
        if not edge_rules.policy_allows(policy, "s3:GetObject", f"arn:aws:s3:::{bucket}/{key}", arn):
            return self._error(403, DENIED, now)
        try:
            obj = self.s3.get_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404"):
                raise
            # S3 says 404 only to a reader that may list the bucket; otherwise 403.
            listed = edge_rules.policy_allows(policy, "s3:ListBucket", f"arn:aws:s3:::{bucket}", arn)
            return self._error(404, NOT_FOUND, now) if listed else self._error(403, DENIED, now)
        body = obj["Body"].read()
        meta = obj["ResponseMetadata"]["HTTPHeaders"]
        headers = {k.title(): v for k, v in meta.items() if k in PASSED}
        headers["Content-Length"] = str(len(body))
        return Response(200, headers, body, now + edge_rules.ttl(behavior, meta.get("cache-control")), now)

    def _error(self, status: int, body: bytes, now: float) -> Response:
        custom = self.rules.errors.get(status)
        ttl = custom.ttl if custom is not None else edge_rules.DEFAULT_ERROR_TTL
        return Response(status, {"Content-Type": "application/xml"}, body, now + ttl, now)

    def _apply_invalidations(self) -> None:
        for invalidation in cloudfront_backend().list_invalidations(self.distribution.id):
            if invalidation.id in self._applied:
                continue
            with self._lock:
                for path in invalidation.paths:
                    for key in [k for k in self._cache if _covers(path, k[0]) and _covers(path, k[1])]:
                        del self._cache[key]
                self._applied.add(invalidation.id)

    # -- serving ----------------------------------------------------------------------------------
    def start(self) -> None:
        edge = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "CloudFront (wheelfoundry local edge)"

            def _serve(self, body: bool) -> None:
                r = edge.handle(self.command, self.path, dict(self.headers.items()))
                edge.log.append((self.command, self.path, r.status, r.headers.get("X-Cache", "")))
                self.send_response(r.status)
                for name, value in r.headers.items():
                    self.send_header(name, value)
                if "Content-Length" not in r.headers:
                    self.send_header("Content-Length", str(len(r.body)))
                self.end_headers()
                if body:
                    self.wfile.write(r.body)

            def do_GET(self) -> None:
                self._serve(True)

            def do_HEAD(self) -> None:
                self._serve(False)

            def _other(self) -> None:
                self._serve(True)

            do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _other

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, name="wheelfoundry-edge", daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@contextmanager
def serving_edge(aws: Any, stack: Any) -> Iterator[LocalEdge]:
    """The stack's public-channel distribution, served on 127.0.0.1 while the block runs."""
    deployed = [d for d in cfn_edge.distributions() if d.id in stack.resources.values()]
    if not deployed:
        raise LookupError("the stack has no public channels (deploy it with PublicChannels=<channel>)")
    edge = LocalEdge(deployed[0], aws.client("s3"))
    edge.start()
    try:
        yield edge
    finally:
        edge.stop()
