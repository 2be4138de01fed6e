"""A public channel as its users see it: HTTPS, no AWS account, a key pinned by its fingerprint.

    wheelfoundry fetch https://wheels.example.org/simple/release/ torch-scatter --dest wheels \
        --key-fingerprint 3f1c...e2
    wheelfoundry verify --index-url https://wheels.example.org/simple/release/ --key-fingerprint 3f1c...e2
    wheelfoundry index serve --index-url https://wheels.example.org/simple/ --key-fingerprint 3f1c...e2

The stack publishes its provenance public key at ``keys/<fingerprint>.pem`` beside the channels; a
user trusts it only when its sha256 (of the DER SubjectPublicKeyInfo) is the fingerprint they were
given, out of band, by the maintainer (``wheelfoundry public-key`` prints it). The edge serving a key
is no reason to trust it: whoever could rewrite the wheels could rewrite that file too.
"""

from __future__ import annotations

import hashlib
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import quote, urlsplit

from wheelfoundry_user import AwsProblem, NotFound, UserError
from wheelfoundry_user.trust import Keyring, TrustedKey

FINGERPRINT = re.compile(r"^(sha256:)?([0-9a-f]{64})$")
CHUNK = 1 << 20
TIMEOUT = 120


def is_url(text: str | None) -> bool:
    return bool(text) and str(text).startswith(("https://", "http://"))


@dataclass(frozen=True)
class PublicIndex:
    """The site that serves a stack's public channels (``base``: scheme, host and any path before /simple/)."""

    base: str
    channel: str | None = None

    @classmethod
    def parse(cls, url: str) -> PublicIndex:
        """``https://HOST/simple/CHANNEL/`` (a channel), ``https://HOST/simple/`` or a wheel's URL (none)."""
        parts = urlsplit(url)
        if parts.scheme not in ("https", "http") or not parts.netloc:
            raise UserError(f"{url}: not an https:// URL")
        path = parts.path
        for marker in ("/simple/", "/wheels/"):
            if marker in path:
                head, _, tail = path.partition(marker)
                channel = tail.split("/", 1)[0] or None
                return cls(f"{parts.scheme}://{parts.netloc}{head}", channel)
        raise UserError(
            f"{url}: not a public index URL (expected https://HOST/simple/CHANNEL/, as the stack's PublicIndexUrl "
            "output gives it, or a wheel's URL under /wheels/)"
        )

    def url(self, key: str) -> str:
        return f"{self.base}/{quote(key)}"

    def _open(self, key: str, headers: dict[str, str] | None = None) -> Any:
        request = urllib.request.Request(self.url(key), headers=headers or {})  # noqa: S310 - parse() took http(s)
        try:
            return urllib.request.urlopen(request, timeout=TIMEOUT)  # noqa: S310 - https (or the local edge)
        except urllib.error.HTTPError as exc:
            if exc.code in (403, 404):  # the edge answers 403 for what it may not read or what is not there
                return None
            raise AwsProblem(f"{self.url(key)}: HTTP {exc.code} {exc.reason}") from None
        except OSError as exc:
            raise AwsProblem(f"{self.url(key)}: {exc}") from None

    def get(self, key: str) -> bytes | None:
        response = self._open(key)
        if response is None:
            return None
        with response:
            return bytes(response.read())

    def stream(self, key: str, into: IO[bytes]) -> tuple[str, int] | None:
        """Copy a file into ``into``; its sha256 and size, or None when the edge does not serve it."""
        response = self._open(key)
        if response is None:
            return None
        digest, size = hashlib.sha256(), 0
        with response:
            for chunk in iter(lambda: response.read(CHUNK), b""):
                digest.update(chunk)
                into.write(chunk)
                size += len(chunk)
        return digest.hexdigest(), size

    def keys(self, prefix: str, delimiter: str | None = None) -> list[str]:
        """A public site cannot be listed: the one channel its URL names."""
        return [f"simple/{self.channel}/"] if self.channel and prefix == "simple/" else []

    def need_channel(self, url: str) -> str:
        if not self.channel:
            raise UserError(f"{url}: name the channel, e.g. {self.base}/simple/<channel>/")
        return self.channel


def fingerprint_arg(text: str) -> str:
    match = FINGERPRINT.fullmatch(text.strip().lower())
    if match is None:
        what = "64 hex digits (a sha256), as `wheelfoundry public-key` prints it"
        raise UserError(f"--key-fingerprint {text!r}: expected {what}")
    return match.group(2)


def pinned_keyring(site: PublicIndex, fingerprints: list[str]) -> Keyring:
    """The keys the user pinned, as the site serves them; a served key of another fingerprint is refused."""
    keys = []
    for wanted in (fingerprint_arg(f) for f in fingerprints):
        url = site.url(f"keys/{wanted}.pem")
        pem = site.get(f"keys/{wanted}.pem")
        if pem is None:
            raise NotFound(f"{url}: the site serves no key of the pinned fingerprint {wanted}")
        key = TrustedKey(pem, f"{url} (pinned)")
        if key.fingerprint != wanted:
            raise UserError(f"{url} holds a key of fingerprint {key.fingerprint}, not the pinned {wanted}: refused")
        keys.append(key)
    return Keyring(tuple(keys))


def require_pin(fingerprints: list[str] | None, public_keys: list[str] | None, url: str) -> None:
    if not fingerprints and not public_keys:
        raise UserError(
            f"{url} is a public index: trusting its wheels needs the key you were given, "
            "--key-fingerprint SHA256 (the maintainer's `wheelfoundry public-key` prints it) or --public-key PEM"
        )


def keyring_for(site: PublicIndex, fingerprints: list[str] | None, public_keys: list[str] | None, url: str) -> Keyring:
    """What a public channel's wheels are checked against: the PEM files named, else the pinned keys."""
    from wheelfoundry_user import trust

    require_pin(fingerprints, public_keys, url)
    if public_keys:
        return Keyring(trust.unique(trust.from_files(public_keys)))
    return pinned_keyring(site, fingerprints or [])


class HttpOrigin:
    """A public site as ``wheelfoundry index serve``'s S3 client: the same verifying proxy over HTTPS.

    ``IfMatch`` is checked on the answer too: a wheel verified by its ETag is served only while the site
    still answers with that ETag, whether or not a cache in between honours If-Match.
    """

    def __init__(self, site: PublicIndex) -> None:
        self.site = site

    def _missing(self, key: str, operation: str) -> Exception:
        from botocore.exceptions import ClientError

        error: Exception = ClientError({"Error": {"Code": "NoSuchKey", "Message": self.site.url(key)}}, operation)
        return error

    def head_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        response = self.site._open(Key)
        if response is None:
            raise self._missing(Key, "HeadObject")
        with response:
            return {"ETag": response.headers.get("ETag", ""), "ContentLength": int(response.headers["Content-Length"])}

    def get_object(self, Bucket: str, Key: str, IfMatch: str | None = None, **_: Any) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        response = self.site._open(Key, {"If-Match": IfMatch} if IfMatch else None)
        if response is None:
            raise self._missing(Key, "GetObject")
        if IfMatch and response.headers.get("ETag") != IfMatch:
            response.close()
            raise ClientError({"Error": {"Code": "PreconditionFailed", "Message": self.site.url(Key)}}, "GetObject")
        return {
            "Body": response,
            "ContentLength": int(response.headers["Content-Length"]),
            "ContentType": response.headers.get("Content-Type"),
        }
