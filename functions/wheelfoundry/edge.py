"""Public channels: what PublishIndex does for a channel that the stack's CloudFront distribution serves.

The distribution (template.yaml, EdgeDistribution) caches by object key after its viewer-request
function has mapped ``.../`` to ``.../index.html`` or ``.../index.v1.json``; objects carry their own
``Cache-Control`` (a wheel a year, a page a minute). A publish invalidates the pages it changed, so the
edge serves a new wheel's page at once; wheels are never invalidated: a published file name never gets
other bytes (Collect refuses the conflict).

Consumers pin the stack's provenance key by fingerprint (the sha256 of its DER SubjectPublicKeyInfo,
as ``wheelfoundry public-key`` prints it) and fetch it from ``keys/<fingerprint>.pem`` through the edge:
the key is only as trusted as the fingerprint they were given, never because the edge served it.
"""

from __future__ import annotations

import base64
import hashlib
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from botocore.exceptions import ClientError

WHEEL_CACHE = "public, max-age=31536000, immutable"  # a published file name never changes bytes
PAGE_CACHE = "public, max-age=60"  # pages change with every publish; the edge is also invalidated
KEYS_PREFIX = "keys/"
MAX_PATHS = 12  # more changed pages than this: one wildcard for the channel (one path of the free 1,000)


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


def public_urls(channel: str, index_url: str, public: str, variants: list[str]) -> dict[str, Any] | None:
    """What a public channel's users type (None for a private channel): its index and find-links pages.

    ``index_url``: the stack's PublicIndexUrl (``https://<domain>/simple/``); ``public``: its channels.
    """
    if not index_url or channel not in public.split(","):
        return None
    base = f"{index_url}{quote(channel)}/"
    return {"index_url": base, "find_links": [f"{base}{quote(v)}.html" for v in variants]}


def cache_paths(channel: str, changed: Iterable[str], everything: bool = False) -> list[str]:
    """The edge's cache keys of the pages written under these S3 keys (``simple/<channel>/...``).

    A page folder's key (``.../proj/``) is never a cache key: the viewer-request function turns it into
    its ``index.html`` or ``index.v1.json``, which are written and listed as changed themselves.
    """
    keys = sorted({k for k in changed if not k.endswith("/")})
    if everything or len(keys) > MAX_PATHS:
        return [f"/simple/{quote(channel)}/*"]
    return [f"/{quote(k, safe='/')}" for k in keys]


def invalidate(cloudfront: Any, distribution_id: str, paths: list[str], reference: str) -> str | None:
    """One invalidation of these paths (None when there are none); the reference makes a retry a no-op."""
    if not paths:
        return None
    batch = {"Paths": {"Quantity": len(paths), "Items": paths}, "CallerReference": reference}
    answer = cloudfront.create_invalidation(DistributionId=distribution_id, InvalidationBatch=batch)
    return str(answer["Invalidation"]["Id"])


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
