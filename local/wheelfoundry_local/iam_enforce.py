"""IAM for the embedded S3: requests signed with assumed-role credentials are authorized.

moto answers every request with the account's full rights. Builds, though, run with the per-job
session a runner mints (``sts:AssumeRole`` on a job role with a session policy, docs/security.md §2),
and the point of that session is what it may NOT do. So the embedded AWS wraps moto's WSGI app:
an S3 request signed with an access key of a moto ``AssumedRole`` is evaluated against that role's
policies as deployed from template.yaml (moto's IAM holds them, intrinsics resolved) intersected with
the session policy, by the offline evaluator in ``iam_policy.py``; anything not allowed gets S3's
403 ``AccessDenied``. Requests with any other key (the emulator's own "testing" credentials: the
handlers, the agent, the tests) pass unchanged, as the account's administrator would.

Limits, by design of this emulation: only S3 is enforced; resource-based policies (the bucket
policy) are not evaluated; ``aws:SecureTransport`` is taken as true (real clients use TLS; this
endpoint is plain HTTP on loopback).
"""

from __future__ import annotations

import html
import io
import json
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ._moto import ACCOUNT_ID
from .iam_policy import Request, decide

_CREDENTIAL = re.compile(r"Credential=([A-Z0-9]+)/\d{8}/[a-z0-9-]+/([a-z0-9-]+)/aws4_request")


@dataclass(frozen=True)
class Decision:
    principal: str  # the assumed-role ARN
    action: str
    resource: str
    result: str  # Allow | ExplicitDeny | ImplicitDeny


def _credential(environ: dict[str, Any]) -> tuple[str, str]:
    """(access key id, service) from a SigV4 Authorization header or presigned query."""
    header = environ.get("HTTP_AUTHORIZATION", "")
    match = _CREDENTIAL.search(header)
    if match:
        return match.group(1), match.group(2)
    query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
    parts = (query.get("X-Amz-Credential") or [""])[0].split("/")
    return (parts[0], parts[3]) if len(parts) == 5 else ("", "")


def _assumed_role(access_key_id: str) -> Any:
    from moto.sts.models import sts_backends

    return sts_backends[ACCOUNT_ID]["aws"].get_assumed_role_from_access_key(access_key_id)


def _documents(value: Any) -> dict[str, Any]:
    return json.loads(urllib.parse.unquote(value)) if isinstance(value, str) else dict(value)


def role_policies(role_arn: str) -> list[dict[str, Any]]:
    """The role's inline and attached managed policies, from moto's IAM (deployed from the template)."""
    from moto.iam.models import iam_backends

    try:
        role = iam_backends[ACCOUNT_ID]["aws"].get_role_by_arn(role_arn)
    except Exception:  # a role that does not exist grants nothing
        return []
    policies = [_documents(doc) for doc in role.policies.values()]
    for managed in role.managed_policies.values():  # moto's Policy: the default version's document
        default = next(v for v in managed.versions if v.version_id == managed.default_version_id)
        policies.append(_documents(default.document))
    return policies


def s3_requests(environ: dict[str, Any], body: bytes) -> list[Request]:
    """The IAM actions one S3 REST request needs (path-style: /bucket/key)."""
    method = environ["REQUEST_METHOD"]
    query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
    path = urllib.parse.unquote(environ.get("PATH_INFO", "/"))
    bucket, _, key = path.lstrip("/").partition("/")
    host = environ.get("HTTP_HOST", "")
    if ".s3." in host and not host.startswith("s3."):  # virtual-hosted style
        bucket, key = host.split(".s3.", 1)[0], path.lstrip("/")
    arn = f"arn:aws:s3:::{bucket}"
    ctx = {"aws:SecureTransport": "true"}
    if not key:
        if method == "POST" and "delete" in query:  # DeleteObjects: one s3:DeleteObject per key
            keys = [html.unescape(k.decode()) for k in re.findall(rb"<Key>(.*?)</Key>", body, re.DOTALL)]
            return [Request("s3:DeleteObject", f"{arn}/{k}", ctx) for k in keys]
        if method in ("GET", "HEAD") and not ({"location", "versioning", "policy", "acl"} & set(query)):
            return [Request("s3:ListBucket", arn, {**ctx, "s3:prefix": (query.get("prefix") or [""])[0]})]
        return [Request(f"s3:{method}Bucket?{'&'.join(sorted(query))}", arn, ctx)]  # matches no policy here
    obj = f"{arn}/{key}"
    sub = {"tagging": "Tagging", "acl": "Acl"}
    suffix = next((v for k, v in sub.items() if k in query), "")
    if method in ("GET", "HEAD"):
        return [Request("s3:ListMultipartUploadParts" if "uploadId" in query else f"s3:GetObject{suffix}", obj, ctx)]
    if method == "DELETE":
        return [Request("s3:AbortMultipartUpload" if "uploadId" in query else f"s3:DeleteObject{suffix}", obj, ctx)]
    out = [Request(f"s3:PutObject{suffix}", obj, ctx)]  # PUT, and POST ?uploads / ?uploadId (multipart)
    source = environ.get("HTTP_X_AMZ_COPY_SOURCE")
    if source:
        out.append(Request("s3:GetObject", "arn:aws:s3:::" + urllib.parse.unquote(source).lstrip("/"), ctx))
    return out


class IamEnforcer:
    """WSGI middleware in front of moto's app; ``decisions`` keeps every evaluated request."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.decisions: list[Decision] = []
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        access_key, service = _credential(environ)
        session = _assumed_role(access_key) if access_key and service == "s3" else None
        if session is None:
            return self.app(environ, start_response)
        body = b""
        if environ["REQUEST_METHOD"] == "POST":  # DeleteObjects names its keys in the body
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length else b""
            environ["wsgi.input"] = io.BytesIO(body)
        identity = role_policies(session.role_arn)
        policy = [json.loads(session.policy)] if session.policy else []
        for request in s3_requests(environ, body):
            result = decide(request, identity, policy)
            with self._lock:
                self.decisions.append(Decision(session.arn, request.action, request.resource, result))
            if result != "Allow":
                return _access_denied(start_response, session.arn, request, result)
        return self.app(environ, start_response)

    def denied(self) -> list[Decision]:
        with self._lock:
            return [d for d in self.decisions if d.result != "Allow"]


def _access_denied(start_response: Callable[..., Any], principal: str, request: Request, result: str) -> list[bytes]:
    why = "of an explicit deny" if result == "ExplicitDeny" else "no identity-based or session policy allows it"
    message = (
        f"User: {principal} is not authorized to perform: {request.action} "
        f'on resource: "{request.resource}" because {why}'
    )
    xml = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
        f"<Message>{_escape(message)}</Message><Resource>{_escape(request.resource)}</Resource></Error>"
    ).encode()
    start_response("403 Forbidden", [("Content-Type", "application/xml"), ("Content-Length", str(len(xml)))])
    return [xml]


def _escape(text: str) -> str:
    return html.escape(text, quote=True)


def enforcing_server(ip_address: str, port: int) -> Any:
    """moto's ThreadedMotoServer, its WSGI app wrapped in an IamEnforcer (``server.enforcer``)."""
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    class Dispatcher(DomainDispatcherApplication):
        """moto's dispatcher, remembering which backend serves a host. moto 5.2.1 works it out again for
        every request, under the one lock all requests share: a listdir and an isdir per moto module,
        then a regex per service URL. With 100 runs at once (bench/concurrency.py) over a hundred server
        threads were seen queued on that lock; the answer for a host never changes."""

        def __init__(self, create_app: Callable[..., Any]) -> None:
            super().__init__(create_app)
            self.known: dict[str | None, Any] = {}

        def get_backend_for_host(self, host: str | None) -> Any:  # called under moto's lock
            if host not in self.known:
                self.known[host] = super().get_backend_for_host(host)
            return self.known[host]

    class EnforcingServer(ThreadedMotoServer):
        enforcer: IamEnforcer

        def _server_entry(self) -> None:  # moto 5.2.1's own body, with the app wrapped
            self.enforcer = IamEnforcer(Dispatcher(create_backend_app))
            self._server = make_server(self._ip_address, self._port, self.enforcer, True)
            self._server_ready_event.set()
            self._server.serve_forever()

    return EnforcingServer(ip_address=ip_address, port=port, verbose=False)
