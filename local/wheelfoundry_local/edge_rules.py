"""What the public channels' distribution decides for one request, read from what the stack deployed.

Pure functions over the deployed distribution's resolved configuration (cfn_edge): which cache
behaviour a path falls under, what its viewer-request and viewer-response functions (the template's own
JavaScript, run by QuickJS) make of the request and the response, what an error turns into (the
distribution's CustomErrorResponses), whether the bucket policy lets the distribution read a key (Origin
Access Control: the service principal with ``AWS:SourceArn``), and how long a response is kept.
Nothing here is a second copy of the template's rules: change the template and the edge changes.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

from .iam_policy import Request, statement_matches

# AWS's managed policies, by the ids templates name them with (CloudFront Developer Guide, "Use managed
# cache policies" and "Use managed response headers policies").
CACHE_POLICIES = {
    "658327ea-f89d-4fab-a63d-7e88639e58f6": ("CachingOptimized", 1, 86400, 31536000),  # min, default, max TTL
    "4135ea2d-6df8-44a3-9df3-4b5a84be39ad": ("CachingDisabled", 0, 0, 0),
}
RESPONSE_HEADERS = {
    "67f7725c-6f97-4210-82d7-5512b31e9d03": {  # SecurityHeadersPolicy
        "Referrer-Policy": "strict-origin-when-cross-origin",
        "Strict-Transport-Security": "max-age=31536000",
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "SAMEORIGIN",
        "X-XSS-Protection": "1; mode=block",
    }
}
SERVICE = "cloudfront.amazonaws.com"
DEFAULT_ERROR_TTL = 10  # CloudFront's error caching minimum TTL when a distribution sets none


class EdgeConfigError(Exception):
    """The distribution uses something the local edge cannot play (an unknown managed policy id, ...)."""


@dataclass(frozen=True)
class Behavior:
    pattern: str | None  # None: the default behaviour
    origin: str
    methods: tuple[str, ...]
    ttl: tuple[int, int, int]  # min, default, max
    viewer_request: str | None  # the function's ARN
    headers: dict[str, str]
    viewer_response: str | None = None  # the function's ARN


@dataclass(frozen=True)
class ErrorResponse:
    """One of the distribution's CustomErrorResponses: how long an origin's error is kept, and what it becomes."""

    ttl: int
    response_code: int | None = None  # with page: the status the viewer gets instead of the origin's
    page: str | None = None  # ResponsePagePath, served through the behaviour that matches it


def _behavior(config: dict[str, Any], pattern: str | None) -> Behavior:
    policy = config.get("CachePolicyId")
    if policy not in CACHE_POLICIES:
        raise EdgeConfigError(f"cache policy {policy!r}: the local edge knows {sorted(CACHE_POLICIES)}")
    headers_policy = config.get("ResponseHeadersPolicyId")
    if headers_policy is not None and headers_policy not in RESPONSE_HEADERS:
        raise EdgeConfigError(f"response headers policy {headers_policy!r} is not one the local edge knows")
    functions = {f["EventType"]: f["FunctionARN"] for f in config.get("FunctionAssociations") or []}
    unknown = set(functions) - {"viewer-request", "viewer-response"}
    if unknown or config.get("LambdaFunctionAssociations"):
        what = sorted(unknown) or "Lambda@Edge"
        raise EdgeConfigError(f"function events {what}: the local edge plays viewer-request and -response functions")
    return Behavior(
        pattern,
        config["TargetOriginId"],
        tuple(config.get("AllowedMethods") or ("GET", "HEAD")),
        CACHE_POLICIES[policy][1:],
        functions.get("viewer-request"),
        dict(RESPONSE_HEADERS.get(headers_policy or "", {})),
        functions.get("viewer-response"),
    )


@dataclass(frozen=True)
class Rules:
    behaviors: tuple[Behavior, ...]  # the ordered cache behaviours, then the default
    buckets: dict[str, str]  # origin id -> bucket name
    errors: dict[int, ErrorResponse]  # origin status -> the distribution's custom error response

    @classmethod
    def of(cls, config: dict[str, Any]) -> Rules:
        ordered = [_behavior(b, b["PathPattern"]) for b in config.get("CacheBehaviors") or []]
        ordered.append(_behavior(config["DefaultCacheBehavior"], None))
        buckets = {}
        for origin in config["Origins"]:
            if "S3OriginConfig" not in origin or not origin.get("OriginAccessControlId"):
                raise EdgeConfigError(f"origin {origin['Id']}: the local edge serves S3 origins with OAC only")
            buckets[origin["Id"]] = origin["DomainName"].split(".s3.", 1)[0]
        errors = {}
        for e in config.get("CustomErrorResponses") or []:
            code, page = e.get("ResponseCode"), e.get("ResponsePagePath")
            if (code is None) != (page is None):  # CloudFront's API refuses one without the other
                raise EdgeConfigError(
                    f"CustomErrorResponses {e['ErrorCode']}: ResponseCode and ResponsePagePath go together"
                )
            ttl = int(e.get("ErrorCachingMinTTL", DEFAULT_ERROR_TTL))
            errors[int(e["ErrorCode"])] = ErrorResponse(ttl, None if code is None else int(code), page)
        return cls(tuple(ordered), buckets, errors)

    def behavior(self, path: str) -> Behavior:
        """The first cache behaviour whose path pattern matches, else the default (CloudFront's order)."""
        for b in self.behaviors:
            if b.pattern is None or _pattern(b.pattern).fullmatch(path):
                return b
        raise AssertionError("the default behaviour matches every path")


@functools.cache
def _pattern(pattern: str) -> re.Pattern[str]:
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern.lstrip("/"))
    return re.compile("/" + body, re.DOTALL)


@functools.cache
def _compiled(code: str) -> Any:
    import quickjs  # type: ignore[import-untyped]  # no stubs; a C extension with one class used here

    return quickjs.Function("handler", code)


def _event(kind: str, method: str, uri: str, headers: dict[str, str], distribution_id: str) -> dict[str, Any]:
    return {
        "version": "1.0",
        "context": {"distributionId": distribution_id, "eventType": kind, "requestId": "local"},
        "viewer": {"ip": "127.0.0.1"},
        "request": {
            "method": method,
            "uri": uri,
            "querystring": {},
            "headers": {k.lower(): {"value": v} for k, v in headers.items()},
            "cookies": {},
        },
    }


def viewer_request(code: str, method: str, uri: str, headers: dict[str, str], distribution_id: str) -> dict[str, Any]:
    """The function's answer: the request it passes on (maybe with another uri), or a response of its own."""
    answer = _compiled(code)(_event("viewer-request", method, uri, headers, distribution_id))
    if not isinstance(answer, dict):
        raise EdgeConfigError(f"the viewer-request function returned {answer!r}, not a request or response")
    return answer


def viewer_response(
    code: str, request: tuple[str, str, dict[str, str]], status: int, headers: dict[str, str], distribution_id: str
) -> tuple[int, dict[str, str]]:
    """The response's status and headers as the function leaves them; ``request``: the viewer's method,
    uri and headers (CloudFront hands the function the request as the viewer sent it)."""
    event = _event("viewer-response", *request, distribution_id)
    event["response"] = {
        "statusCode": status,
        "headers": {k.lower(): {"value": v} for k, v in headers.items()},
        "cookies": {},
    }
    answer = _compiled(code)(event)
    if not isinstance(answer, dict) or not isinstance(answer.get("headers"), dict):
        raise EdgeConfigError(f"the viewer-response function returned {answer!r}, not a response")
    names = {k.lower(): k for k in headers}  # the names as the origin spelled them; new ones title-cased
    out = {names.get(k, k.title()): str(v["value"]) for k, v in answer["headers"].items()}
    return int(answer.get("statusCode", status)), out


def object_key(uri: str) -> str:
    """The S3 key a path names: S3 reads a literal '+' in a path as a space (so '+' must arrive as %2B,
    e.g. dnbert/prm#46), and percent-decodes the rest."""
    return unquote_plus(uri.lstrip("/"))


def _principal(statement: dict[str, Any]) -> bool:
    principal = statement.get("Principal")
    if principal == "*":
        return True
    if isinstance(principal, dict):
        services = principal.get("Service")
        everyone = principal.get("AWS") == "*"
        return everyone or SERVICE in (services if isinstance(services, list) else [services])
    return False


def policy_allows(policy: dict[str, Any], action: str, resource: str, distribution_arn: str) -> bool:
    """The bucket policy's answer for the distribution (the only principal the edge reads as)."""
    context = {"AWS:SourceArn": distribution_arn, "aws:SecureTransport": "true"}  # CloudFront reads S3 over TLS
    request = Request(action, resource, context)
    statements = [s for s in policy.get("Statement") or [] if _principal(s)]
    if any(s["Effect"] == "Deny" and statement_matches(s, request) for s in statements):
        return False
    return any(s["Effect"] == "Allow" and statement_matches(s, request) for s in statements)


def ttl(behavior: Behavior, cache_control: str | None) -> int:
    """Seconds a 200 is kept: the object's max-age (s-maxage first), within the cache policy's bounds."""
    low, default, high = behavior.ttl
    if high == 0:
        return 0
    directives = {}
    for part in (cache_control or "").lower().split(","):
        name, _, value = part.strip().partition("=")
        directives[name] = value
    for name in ("s-maxage", "max-age"):
        if directives.get(name, "").isdigit():
            return max(low, min(high, int(directives[name])))
    return default
