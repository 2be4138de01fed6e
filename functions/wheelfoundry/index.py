"""A PEP 503 simple index with PEP 658 metadata, written into the bucket for one channel.

Layout: ``simple/<channel>/`` lists projects, ``simple/<channel>/<project>/`` lists files that
live under ``wheels/<channel>/<project>/``. Each page is stored twice, as ``.../index.html`` and
under the key ending in ``/``, so both a static website and plain GETs of the directory URL work.
Publishing rewrites pages from what is in the bucket: it is idempotent and deletes nothing.

A wheel with a signed provenance envelope beside it (``<wheel>.provenance.json``, wheelfoundry.provenance)
gets ``data-wf-provenance="<url>"``. Not PEP 740's ``data-provenance``: that URL must serve a PEP 740
provenance object, whose attestations carry a Sigstore certificate and transparency-log entries; ours is
a DSSE envelope signed by the stack's KMS key, which a PEP 740 client would (rightly) reject.
"""

from __future__ import annotations

import html
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from packaging.utils import canonicalize_name, parse_wheel_filename

from wheelfoundry.provenance import SUFFIX as PROVENANCE_SUFFIX

HTML_TYPE = "text/html; charset=utf-8"
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


def _list(s3: Any, bucket: str, prefix: str) -> list[str]:
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(obj["Key"] for obj in page.get("Contents", []))
    return keys


def _put_page(s3: Any, bucket: str, prefix: str, body: str) -> None:
    for key in (f"{prefix}index.html", prefix):
        s3.put_object(Bucket=bucket, Key=key, Body=body.encode(), ContentType=HTML_TYPE, CacheControl="max-age=60")


def scan(s3: Any, bucket: str, channel: str) -> dict[str, list[IndexFile]]:
    """Every published wheel of the channel, with what the index needs to know about it."""
    keys = _list(s3, bucket, f"wheels/{channel}/")
    present = set(keys)
    projects: dict[str, list[IndexFile]] = defaultdict(list)
    for key in keys:
        filename = key.rsplit("/", 1)[-1]
        if not filename.endswith(".whl"):
            continue
        project = canonicalize_name(parse_wheel_filename(filename)[0])
        meta = s3.head_object(Bucket=bucket, Key=key).get("Metadata", {})
        metadata_sha = None
        if f"{key}.metadata" in present:
            metadata_sha = s3.head_object(Bucket=bucket, Key=f"{key}.metadata").get("Metadata", {}).get("sha256")
        signed = f"{key}{PROVENANCE_SUFFIX}" in present
        variants = tuple(v for v in meta.get("wf-variants", "").split(",") if VARIANT.fullmatch(v))
        projects[project].append(
            IndexFile(filename, meta.get("sha256", ""), meta.get("requires-python"), metadata_sha, signed, variants)
        )
    return projects


def publish_index(s3: Any, bucket: str, channel: str) -> dict[str, Any]:
    projects = scan(s3, bucket, channel)
    for project, files in projects.items():
        _put_page(s3, bucket, f"simple/{channel}/{project}/", render_project(channel, project, files))
    _put_page(s3, bucket, f"simple/{channel}/", render_root(channel, list(projects)))
    variants = publish_variants(s3, bucket, channel, projects)
    return {
        "channel": channel,
        "index_prefix": f"simple/{channel}/",
        "projects": {p: len(f) for p, f in sorted(projects.items())},
        "variants": variants,
    }


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
