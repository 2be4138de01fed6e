"""A PEP 503 simple index with PEP 658 metadata, written into the bucket for one channel.

Layout: ``simple/<channel>/`` lists projects, ``simple/<channel>/<project>/`` lists files that
live under ``wheels/<channel>/<project>/``. Each page is stored twice, as ``.../index.html`` and
under the key ending in ``/``, so both a static website and plain GETs of the directory URL work.
Publishing rewrites pages from what is in the bucket: it is idempotent, deletes nothing, and runs
publishing into one channel at once take turns (``publish_index``).

A wheel with a signed provenance envelope beside it (``<wheel>.provenance.json``, wheelfoundry.provenance)
gets ``data-wf-provenance="<url>"``. Not PEP 740's ``data-provenance``: that URL must serve a PEP 740
provenance object, whose attestations carry a Sigstore certificate and transparency-log entries; ours is
a DSSE envelope signed by the stack's KMS key, which a PEP 740 client would (rightly) reject.
"""

from __future__ import annotations

import html
import json
import random
import re
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from botocore.exceptions import ClientError
from packaging.utils import canonicalize_name, parse_wheel_filename

from wheelfoundry.errors import IndexConflict
from wheelfoundry.provenance import SUFFIX as PROVENANCE_SUFFIX

HTML_TYPE = "text/html; charset=utf-8"
STATE = ".index-state.json"  # simple/<channel>/.index-state.json: the last publish's listing, and its turn
CONFLICT = ("PreconditionFailed", "ConditionalRequestConflict")  # S3: the state file changed since it was read
VARIANT = re.compile(r"torch-[0-9][0-9a-z.]*\+(cpu|cu[0-9]{2,4})")


@dataclass(frozen=True)
class IndexFile:
    filename: str
    sha256: str
    requires_python: str | None
    metadata_sha256: str | None
    provenance: bool = False
    variants: tuple[str, ...] = ()  # torch-2.13.0+cpu: the (torch, CUDA) indexes that list a per-cell wheel


def _page(title: str, links: list[str]) -> str:
    body = "\n".join(links)
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n"
        '<meta name="pypi:repository-version" content="1.1">\n'
        f"<title>{html.escape(title)}</title>\n</head>\n<body>\n<h1>{html.escape(title)}</h1>\n"
        f"{body}\n</body>\n</html>\n"
    )


def render_root(channel: str, projects: list[str]) -> str:
    links = [f'<a href="{quote(p)}/">{html.escape(p)}</a><br/>' for p in sorted(projects)]
    return _page(f"WheelFoundry index: {channel}", links)


def render_project(channel: str, project: str, files: list[IndexFile], up: str = "../../../") -> str:
    return _page(f"Links for {project}", _links(channel, files, up))


def render_find_links(channel: str, variant: str, files: list[IndexFile]) -> str:
    """``simple/<channel>/torch-2.13.0+cpu.html``: every wheel built for that torch, for ``pip install -f``."""
    return _page(f"WheelFoundry {channel}: wheels for {variant}", _links(channel, files, "../../"))


def _links(channel: str, files: list[IndexFile], up: str) -> list[str]:
    links = []
    for f in sorted(files, key=lambda f: f.filename):
        project = canonicalize_name(parse_wheel_filename(f.filename)[0])
        href = f"{up}wheels/{quote(channel)}/{quote(project)}/{quote(f.filename)}#sha256={f.sha256}"
        attrs = [f'href="{html.escape(href)}"']
        if f.requires_python:
            attrs.append(f'data-requires-python="{html.escape(f.requires_python)}"')
        if f.metadata_sha256:
            # PEP 714 spells it data-core-metadata; older pip reads data-dist-info-metadata.
            attrs.append(f'data-core-metadata="sha256={f.metadata_sha256}"')
            attrs.append(f'data-dist-info-metadata="sha256={f.metadata_sha256}"')
        if f.provenance:
            where = f"{up}wheels/{quote(channel)}/{quote(project)}/{quote(f.filename + PROVENANCE_SUFFIX)}"
            attrs.append(f'data-wf-provenance="{html.escape(where)}"')
        links.append(f"<a {' '.join(attrs)}>{html.escape(f.filename)}</a><br/>")
    return links


def _listing(s3: Any, bucket: str, prefix: str) -> dict[str, str]:
    """Every key under the prefix with its ETag (one LIST call per 1000 keys)."""
    keys: dict[str, str] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.update((obj["Key"], obj.get("ETag", "")) for obj in page.get("Contents", []))
    return keys


def _put_page(s3: Any, bucket: str, prefix: str, body: str) -> None:
    for key in (f"{prefix}index.html", prefix):
        s3.put_object(Bucket=bucket, Key=key, Body=body.encode(), ContentType=HTML_TYPE, CacheControl="max-age=60")


def _read_state(s3: Any, bucket: str, key: str) -> tuple[str | None, dict[str, Any]]:
    try:
        obj = s3.get_object(Bucket=bucket, Key=key)
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return None, {}
        raise
    state = json.loads(obj["Body"].read())
    return obj["ETag"], state if isinstance(state, dict) else {}


def _entry(s3: Any, bucket: str, key: str, listing: dict[str, str], known: dict[str, Any]) -> dict[str, Any]:
    """What the index says about one wheel; HEADs only a wheel (or .metadata) the last publish did not see."""
    etag, meta_etag = listing[key], listing.get(f"{key}.metadata")
    old = known.get(key)
    if old and old.get("etag") == etag and old.get("metadata_etag") == meta_etag:
        return dict(old)
    meta = s3.head_object(Bucket=bucket, Key=key).get("Metadata", {})
    metadata_sha = None
    if meta_etag is not None:
        metadata_sha = s3.head_object(Bucket=bucket, Key=f"{key}.metadata").get("Metadata", {}).get("sha256")
    return {
        "etag": etag,
        "metadata_etag": meta_etag,
        "sha256": meta.get("sha256", ""),
        "requires_python": meta.get("requires-python"),
        "metadata_sha256": metadata_sha,
        "variants": [v for v in meta.get("wf-variants", "").split(",") if VARIANT.fullmatch(v)],
    }


def scan(s3: Any, bucket: str, channel: str, known: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Every published wheel of the channel (its key), with what the index needs to know about it.

    ``known`` is the last publish's answer (its state file): unchanged wheels are not HEADed again, so
    a channel's N-th publish costs its LIST pages plus the new wheels, not N HEADs.
    """
    listing = _listing(s3, bucket, f"wheels/{channel}/")
    entries = {}
    for key in sorted(listing):
        if key.endswith(".whl"):
            entries[key] = _entry(s3, bucket, key, listing, known or {})
            entries[key]["provenance"] = f"{key}{PROVENANCE_SUFFIX}" in listing
    return entries


def _projects(entries: dict[str, dict[str, Any]]) -> dict[str, list[IndexFile]]:
    projects: dict[str, list[IndexFile]] = defaultdict(list)
    for key, e in entries.items():
        filename = key.rsplit("/", 1)[-1]
        project = canonicalize_name(parse_wheel_filename(filename)[0])
        projects[project].append(
            IndexFile(
                filename, e["sha256"], e["requires_python"], e["metadata_sha256"], e["provenance"], tuple(e["variants"])
            )
        )
    return projects


def _jittered(attempt: int) -> None:
    time.sleep(random.uniform(0, min(5.0, 0.2 * 2**attempt)))  # noqa: S311 (backoff jitter, no secret)


def publish_index(
    s3: Any, bucket: str, channel: str, attempts: int = 8, pause: Callable[[int], None] = _jittered
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
    """
    state_key = f"simple/{channel}/{STATE}"
    for attempt in range(attempts):
        etag, state = _read_state(s3, bucket, state_key)
        entries = scan(s3, bucket, channel, state.get("wheels"))
        projects = _projects(entries)
        for project, files in projects.items():
            _put_page(s3, bucket, f"simple/{channel}/{project}/", render_project(channel, project, files))
        _put_page(s3, bucket, f"simple/{channel}/", render_root(channel, list(projects)))
        variants = publish_variants(s3, bucket, channel, projects)
        condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        body = json.dumps({"format": 1, "channel": channel, "wheels": entries}, sort_keys=True).encode()
        try:
            s3.put_object(Bucket=bucket, Key=state_key, Body=body, ContentType="application/json", **condition)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") not in CONFLICT:
                raise
            pause(attempt)
            continue
        return {
            "channel": channel,
            "index_prefix": f"simple/{channel}/",
            "projects": {p: len(f) for p, f in sorted(projects.items())},
            "variants": variants,
            "attempts": attempt + 1,
        }
    raise IndexConflict(
        f"the index of channel {channel!r} changed under each of {attempts} attempts to publish it "
        "(other runs publishing into it at once); the state machine retries"
    )


def publish_variants(s3: Any, bucket: str, channel: str, projects: dict[str, list[IndexFile]]) -> list[str]:
    """Per-cell wheels: one index per (torch, CUDA) variant and a find-links page, as the PyG wheel index has.

    ``pip install NAME --index-url .../simple/<channel>/torch-2.13.0+cpu/`` or ``-f .../simple/<channel>/
    torch-2.13.0+cpu.html`` sees only the wheels built for that torch, whatever their local labels sort to.
    """
    by_variant: dict[str, dict[str, list[IndexFile]]] = defaultdict(lambda: defaultdict(list))
    for project, files in projects.items():
        for f in files:
            for variant in f.variants:
                by_variant[variant][project].append(f)
    for variant, found in by_variant.items():
        base = f"simple/{channel}/{variant}/"
        for project, files in found.items():
            _put_page(s3, bucket, f"{base}{project}/", render_project(channel, project, files, "../../../../"))
        _put_page(s3, bucket, base, render_root(f"{channel} {variant}", list(found)))
        every = [f for files in found.values() for f in files]
        body = render_find_links(channel, variant, every).encode()
        s3.put_object(Bucket=bucket, Key=f"simple/{channel}/{variant}.html", Body=body, ContentType=HTML_TYPE)
    return sorted(by_variant)
