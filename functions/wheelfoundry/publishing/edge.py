"""Public channels: what PublishIndex does for a channel that the stack's CloudFront distribution serves.

The distribution (template.yaml, EdgeDistribution) caches by object key after its viewer-request
function has mapped ``.../`` to ``.../index.html`` or ``.../index.v1.json``; objects carry their own
``Cache-Control`` (a wheel a year, a page a minute). A publish that changed a page invalidates the
channel's pages, so the edge serves a new wheel's page at once; wheels are never invalidated: a published
file name never gets other bytes (Collect refuses the conflict). Whatever the edge may not read answers
404 with the site's own small page (``simple/404.html``, template.yaml: CustomErrorResponses).

Consumers pin the stack's provenance key by fingerprint (the sha256 of its DER SubjectPublicKeyInfo,
as ``wheelfoundry public-key`` prints it) and fetch it from ``keys/<fingerprint>.pem`` through the edge:
the key is only as trusted as the fingerprint they were given, never because the edge served it.
"""

from __future__ import annotations

import base64
import hashlib
import html
import textwrap
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from botocore.exceptions import BotoCoreError, ClientError

from wheelfoundry.errors import EdgeInvalidationFailed

WHEEL_CACHE = "public, max-age=31536000, immutable"  # a published file name never changes bytes
PAGE_CACHE = "public, max-age=60"  # pages change with every publish; the edge is also invalidated
KEYS_PREFIX = "keys/"
SITE_ROOT = "simple/index.html"  # the public channels, for a browser at PublicIndexUrl
NOT_FOUND = "simple/404.html"  # the distribution's body for every 403 and 404 (its ResponsePagePath)


@dataclass(frozen=True)
class Edge:
    """The public channels and the distribution that serves them (PublishIndex's environment)."""

    channels: frozenset[str]
    distribution_id: str
    key_arn: str = ""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Edge | None:
        names = frozenset(c for c in environ.get("WF_PUBLIC_CHANNELS", "").split(",") if c)
        distribution = environ.get("WF_EDGE_DISTRIBUTION_ID", "")
        if not names or not distribution:
            return None
        return cls(names, distribution, environ.get("WF_PROVENANCE_KEY_ARN", ""))

    def serves(self, channel: str) -> bool:
        return channel in self.channels


def public_urls(
    channel: str, index_url: str, public: str, variants: list[str], variant_indexes: Collection[str] = ()
) -> dict[str, Any] | None:
    """What a public channel's users type (None for a private channel): first the variant indexes (one per torch
    minor and CPU/CUDA variant, the whole channel for it: wheelfoundry.publishing.index_variants), then the channel-wide
    index and the find-links pages.

    ``index_url``: the stack's PublicIndexUrl (``https://<domain>/simple/``); ``public``: its channels.
    """
    if not index_url or channel not in public.split(","):
        return None
    base = f"{index_url}{quote(channel)}/"
    return {
        "variant_indexes": {name: f"{base}{quote(name)}/" for name in sorted(variant_indexes)},
        "index_url": base,
        "find_links": [f"{base}{quote(v)}.html" for v in variants],
    }


def cache_paths(channel: str, changed: Collection[str], everything: bool = False) -> list[str]:
    """What to invalidate after a publish that changed these pages (S3 keys): the channel's wildcard, or nothing.

    Viewers spell one page many ways: ``.../proj/`` and ``.../proj/index.html``, ``+``, ``%2B`` and ``%2b``
    in a variant's name. CloudFront's guide asks for both the viewer's URI and the one the viewer-request
    function made of it, and its paths are case sensitive, so the written keys alone would leave some
    spellings stale. ``/simple/<channel>/*`` covers every spelling and every miss cached before the page
    existed, and CloudFront counts it as one path (the first 1,000 a month are free): one per publish.
    """
    if everything or changed:
        return [f"/simple/{quote(channel)}/*"]
    return []


def invalidate(cloudfront: Any, distribution_id: str, paths: list[str], reference: str) -> str | None:
    """One invalidation of these paths (None when there are none); the reference makes a retry a no-op.

    Raises EdgeInvalidationFailed, which the state machine retries: PublishIndex calls this before it
    writes the channel's state, so a retry still sees the pages as changed and invalidates them again.
    """
    if not paths:
        return None
    batch = {"Paths": {"Quantity": len(paths), "Items": paths}, "CallerReference": reference}
    try:
        answer = cloudfront.create_invalidation(DistributionId=distribution_id, InvalidationBatch=batch)
    except (ClientError, BotoCoreError) as exc:
        raise EdgeInvalidationFailed(
            f"CreateInvalidation of {paths} on distribution {distribution_id} (CallerReference {reference}) "
            f"failed: {exc}; the state machine retries the publish"
        ) from exc
    return str(answer["Invalidation"]["Id"])


def site_pages(channels: Iterable[str]) -> dict[str, str]:
    """The site's own two pages (S3 key -> HTML): its root, linking each public channel, and its 404 body.

    Only the public channels are named: a private one must look like nothing at all from outside.
    """
    links = "\n".join(f'<a href="{quote(c)}/">{html.escape(c)}</a><br/>' for c in sorted(channels))
    root = (
        "<!DOCTYPE html>\n<html>\n<head>\n<title>WheelFoundry public channels</title>\n</head>\n<body>\n"
        f"<h1>WheelFoundry public channels</h1>\n{links}\n</body>\n</html>\n"
    )
    missing = (
        "<!DOCTYPE html>\n<html>\n<head>\n<title>404 Not Found</title>\n</head>\n<body>\n"
        "<h1>404 Not Found</h1>\n<p>Nothing is published here.</p>\n</body>\n</html>\n"
    )
    return {SITE_ROOT: root, NOT_FOUND: missing}


def publish_site(s3: Any, bucket: str, channels: Iterable[str]) -> None:
    """Write the site's root and 404 pages (each publish of a public channel: two small PUTs, always current)."""
    for key, body in site_pages(channels).items():
        s3.put_object(
            Bucket=bucket, Key=key, Body=body.encode(), ContentType="text/html; charset=utf-8", CacheControl=PAGE_CACHE
        )


def pem(der: bytes) -> bytes:
    """DER SubjectPublicKeyInfo (KMS GetPublicKey) as PEM, RFC 7468's textual encoding."""
    body = "\n".join(textwrap.wrap(base64.b64encode(der).decode(), 64))
    return f"-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----\n".encode()


def fingerprint(der: bytes) -> str:
    return hashlib.sha256(der).hexdigest()


def publish_key(s3: Any, kms: Any, bucket: str, key_arn: str) -> str:
    """``keys/<fingerprint>.pem`` of the stack's current provenance key (written once); its fingerprint.

    Earlier keys stay where they were written, so wheels signed before a key was replaced still verify
    for a consumer who pinned the earlier fingerprint.
    """
    der = kms.get_public_key(KeyId=key_arn)["PublicKey"]
    print_ = fingerprint(der)
    key = f"{KEYS_PREFIX}{print_}.pem"
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
            raise
        s3.put_object(
            Bucket=bucket, Key=key, Body=pem(der), ContentType="application/x-pem-file", CacheControl=WHEEL_CACHE
        )
    return print_
