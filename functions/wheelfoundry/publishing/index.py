"""A PEP 503 simple index with PEP 658 metadata and PEP 691 JSON, written into the bucket for one channel.

Layout: ``simple/<channel>/`` lists projects, ``simple/<channel>/<project>/`` lists files that
live under ``wheels/<channel>/<project>/``. Each page is stored as ``.../index.html`` and under the key
ending in ``/`` (plain GETs of the directory URL), and as ``.../index.v1.json`` (wheelfoundry.publishing.index_pages).
Publishing rewrites pages from what is in the bucket: it is idempotent, deletes nothing, and runs
publishing into one channel at once take turns (``publish_index``). A public channel's changed pages
are invalidated at the edge (wheelfoundry.publishing.edge) before the publish is recorded as done. Which wheels the
channel-wide and the per-(torch, variant) indexes list: wheelfoundry.publishing.index_variants. A ``<wheel>.yanked``
beside a wheel yanks it (PEP 592); a name once published never gets other bytes (``ever_published``).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Callable
from email.parser import BytesHeaderParser
from typing import Any

from botocore.exceptions import ClientError
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from wheelfoundry.conditional import CONFLICT, jittered
from wheelfoundry.errors import IndexConflict, PublishedNameReused
from wheelfoundry.publishing import edge as edges
from wheelfoundry.publishing import served
from wheelfoundry.publishing.index_pages import (
    IndexFile,
    Pages,
    render_project,
    render_project_json,
    render_root,
    render_root_json,
)
from wheelfoundry.publishing.index_variants import channel_files, write_variants
from wheelfoundry.publishing.provenance import SUFFIX as PROVENANCE_SUFFIX
from wheelfoundry.publishing.served import VARIANT

__all__ = [
    "STATE",
    "YANKED",
    "IndexFile",
    "channel_state",
    "publish_index",
    "published_sha256",
    "render_project",
    "render_root",
    "scan",
]

STATE = ".index-state.json"  # simple/<channel>/.index-state.json: the last publish's listing, and its turn
YANKED = ".yanked"  # wheels/<ch>/<project>/<wheel>.yanked: PEP 592's yank (its body the reason); bytes stay


def _listing(s3: Any, bucket: str, prefix: str) -> tuple[dict[str, str], dict[str, int]]:
    """Every key under the prefix with its change token, and its size (one LIST call per 1000 keys). The token
    is the ETag and the time it was written: a copy of an object onto itself with new metadata keeps a single-part
    object's ETag."""
    keys: dict[str, str] = {}
    sizes: dict[str, int] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            written = obj.get("LastModified")
            keys[obj["Key"]] = f"{obj.get('ETag', '')}@{written.isoformat() if written else ''}"
            sizes[obj["Key"]] = int(obj.get("Size", 0))
    return keys, sizes


def _read_state(s3: Any, bucket: str, key: str) -> tuple[str | None, dict[str, Any]]:
    try:
        obj = s3.get_object(Bucket=bucket, Key=key)
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return None, {}
        raise
    state = json.loads(obj["Body"].read())
    return obj["ETag"], state if isinstance(state, dict) else {}


def requires_torch(metadata: bytes) -> str | None:
    """The torch specifier a wheel's METADATA requires unconditionally ("" for any torch), None: no torch."""
    for line in BytesHeaderParser().parsebytes(metadata).get_all("Requires-Dist") or []:
        try:
            req = Requirement(str(line))
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) == "torch" and req.marker is None:
            return str(req.specifier)
    return None


def _entry(
    s3: Any, bucket: str, key: str, listing: dict[str, str], known: dict[str, Any], retested: list[str]
) -> dict[str, Any]:
    """What the index says about one wheel; reads only a wheel (or .metadata, .yanked) the last publish did not see.
    ``retested``: the variants its markers name (publishing.served), listed after its build's."""
    etag, meta_etag, yank_etag = listing[key], listing.get(f"{key}.metadata"), listing.get(f"{key}{YANKED}")
    old = known.get(key)
    same = ("etag", etag), ("metadata_etag", meta_etag), ("yanked_etag", yank_etag), ("served", retested)
    if old and "requires_torch" in old and all(old.get(k, [] if k == "served" else None) == v for k, v in same):
        return dict(old)
    meta = s3.head_object(Bucket=bucket, Key=key).get("Metadata", {})
    metadata_sha = torch = yanked = None
    # Only what changed is read again: a wheel whose object or markers changed HEADs the wheel and keeps its
    # METADATA's reading.
    if meta_etag is not None and old and old.get("metadata_etag") == meta_etag and "requires_torch" in old:
        metadata_sha, torch = old.get("metadata_sha256"), old.get("requires_torch")
    elif meta_etag is not None:
        obj = s3.get_object(Bucket=bucket, Key=f"{key}.metadata")
        metadata_sha, torch = obj.get("Metadata", {}).get("sha256"), requires_torch(obj["Body"].read())
    if yank_etag is not None and old and old.get("yanked_etag") == yank_etag:
        yanked = old.get("yanked")
    elif yank_etag is not None:
        yanked = s3.get_object(Bucket=bucket, Key=f"{key}{YANKED}")["Body"].read().decode("utf-8", "replace")[:500]
    built = [v for v in meta.get("wf-variants", "").split(",") if VARIANT.fullmatch(v)]  # its build run's tests
    return {
        "etag": etag,
        "metadata_etag": meta_etag,
        "yanked_etag": yank_etag,
        "sha256": meta.get("sha256", ""),
        "requires_python": meta.get("requires-python"),
        "metadata_sha256": metadata_sha,
        "requires_torch": torch,
        "yanked": None if yanked is None else yanked.strip(),
        "served": retested,
        "variants": list(dict.fromkeys([*built, *retested])),
    }


def scan(s3: Any, bucket: str, channel: str, known: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Every published wheel of the channel (its key), with what the index needs to know about it.

    ``known`` is the last publish's answer (its state file): unchanged wheels are not HEADed again, so
    a channel's N-th publish costs its LIST pages plus the new wheels, not N HEADs.
    """
    listing, sizes = _listing(s3, bucket, f"wheels/{channel}/")
    retested = served.from_listing(listing)
    entries = {}
    for key in sorted(listing):
        if key.endswith(".whl"):
            entries[key] = _entry(s3, bucket, key, listing, known or {}, retested.get(key, []))
            entries[key]["provenance"] = f"{key}{PROVENANCE_SUFFIX}" in listing
            entries[key]["size"] = sizes[key]
    return entries


def _projects(entries: dict[str, dict[str, Any]]) -> dict[str, list[IndexFile]]:
    projects: dict[str, list[IndexFile]] = defaultdict(list)
    for key, e in entries.items():
        filename = key.rsplit("/", 1)[-1]
        project = canonicalize_name(parse_wheel_filename(filename)[0])
        projects[project].append(
            IndexFile(
                filename,
                e["sha256"],
                e["requires_python"],
                e["metadata_sha256"],
                e["provenance"],
                tuple(e["variants"]),
                e.get("size"),
                e.get("yanked"),
                e.get("requires_torch"),
            )
        )
    return projects


def ever_published(channel: str, state: dict[str, Any], entries: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Every wheel key the channel has published, with its sha256: the state's record, and the scan's new wheels.

    A name, once served, never gets other bytes (an edge or a user's cache keeps the old ones for a year: a hash
    mismatch). Withdrawn wheels are yanked and stay; a name whose bytes changed, or came back with others after
    a delete, is refused here and by Collect (``published_sha256``).
    """
    published = dict(state.get("published") or {k: w.get("sha256", "") for k, w in (state.get("wheels") or {}).items()})
    for key, e in entries.items():
        was = published.get(key)
        if was and e["sha256"] and was != e["sha256"]:
            raise PublishedNameReused(
                f"{key.rsplit('/', 1)[-1]}: channel {channel!r} published it with sha256 {was}, and {key} now holds "
                f"sha256 {e['sha256']}: a published name never gets new bytes; put the published bytes back "
                "and publish the change as a new version"
            )
        published[key] = e["sha256"] or was or ""
    return published


def channel_state(s3: Any, bucket: str, channel: str) -> dict[str, Any]:
    """The channel's index state as its last publish wrote it ({} before the first)."""
    return _read_state(s3, bucket, f"simple/{channel}/{STATE}")[1]


def published_sha256(s3: Any, bucket: str, channel: str) -> dict[str, str]:
    """What the channel's index state says was ever published (key -> sha256), for Collect."""
    state = channel_state(s3, bucket, channel)
    return dict(state.get("published") or {k: w.get("sha256", "") for k, w in (state.get("wheels") or {}).items()})


def publish_index(
    s3: Any,
    bucket: str,
    channel: str,
    attempts: int = 8,
    pause: Callable[[int], None] = jittered,
    public: edges.Edge | None = None,
    clients: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Rewrite the channel's pages from the bucket, safe against runs publishing into it at once.

    Each run rewrites whole pages from a listing, so two runs at once could each write a listing
    without the other's wheel, the later write winning: a lost update. The state file
    ``simple/<channel>/.index-state.json`` makes the rewrites take turns (optimistic concurrency): read
    it with its ETag, list, write the pages, then write it back only if its ETag is still the one read
    (S3 conditional writes, If-Match / If-None-Match). A publish that loses the race lists and writes
    again. The last successful writer read the state after every earlier write, so its listing holds
    every wheel put before any successful publish; a stale page write is always followed by its own
    writer's retry.

    ``public``: the stack's public channels (wheelfoundry.publishing.edge); when it serves this channel, each attempt
    invalidates the channel's pages at the edge if any page's bytes changed since the state it read (always
    after a lost race, whose stale writes the edge may have seen) before it writes the state, so a failed
    invalidation is retried, not forgotten; the provenance key and the site's own pages are published too.
    ``clients`` then holds ``cloudfront`` and ``kms``.
    """
    state_key = f"simple/{channel}/{STATE}"
    for attempt in range(attempts):
        etag, state = _read_state(s3, bucket, state_key)
        entries = scan(s3, bucket, channel, state.get("wheels"))
        published = ever_published(channel, state, entries)
        projects = _projects(entries)
        pages = Pages(s3, bucket)
        for project, files in projects.items():
            mine = channel_files(files)  # right for any torch (wheelfoundry.publishing.index_variants)
            pages.folder(
                f"simple/{channel}/{project}/",
                render_project(channel, project, mine),
                render_project_json(channel, project, mine),
            )
        pages.folder(f"simple/{channel}/", render_root(channel, list(projects)), render_root_json(list(projects)))
        written = write_variants(pages, channel, projects)
        condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        record = {"format": 1, "channel": channel, "wheels": entries, "pages": pages.digests, "published": published}
        body = json.dumps(record, sort_keys=True).encode()
        refreshed = None
        if public is not None and public.serves(channel):
            # Before the state: a failure here leaves the pages "changed" against the state a retry reads.
            reference = hashlib.sha256(f"{etag}\n".encode() + body).hexdigest()[:40]
            refreshed = _refresh_edge(public, clients or {}, s3, bucket, channel, pages, state, attempt, reference)
        try:
            s3.put_object(Bucket=bucket, Key=state_key, Body=body, ContentType="application/json", **condition)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") not in CONFLICT:
                raise
            pause(attempt)
            continue
        result = {
            "channel": channel,
            "index_prefix": f"simple/{channel}/",
            "projects": {p: len(f) for p, f in sorted(projects.items())},
            "variants": written["variants"],
            "variant_indexes": written["variant_indexes"],
            "attempts": attempt + 1,
        }
        if refreshed is not None:
            result["edge"] = refreshed
        return result
    raise IndexConflict(
        f"the index of channel {channel!r} changed under each of {attempts} attempts to publish it "
        "(other runs publishing into it at once); the state machine retries"
    )


def _refresh_edge(
    public: edges.Edge,
    clients: dict[str, Any],
    s3: Any,
    bucket: str,
    channel: str,
    pages: Pages,
    before: dict[str, Any],
    attempt: int,
    reference: str,
) -> dict[str, Any]:
    """The site's pages and the provenance key, then one invalidation if the channel's pages changed.

    ``reference``: the state read and the one about to be written; the same publish retried makes no
    second invalidation, and any other publish (even one back to an earlier listing) makes its own.
    """
    edges.publish_site(s3, bucket, public.channels)
    changed = pages.changed(before.get("pages") or {})
    paths = edges.cache_paths(channel, changed, everything=attempt > 0)
    reference = f"{channel}-{reference}"
    out: dict[str, Any] = {
        "distribution": public.distribution_id,
        "changed_pages": len(changed),
        "invalidated": paths,
        "invalidation": edges.invalidate(clients["cloudfront"], public.distribution_id, paths, reference),
    }
    if public.key_arn:
        out["key_fingerprint"] = edges.publish_key(s3, clients["kms"], bucket, public.key_arn)
    return out
