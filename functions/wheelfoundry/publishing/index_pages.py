"""The pages of a channel's simple index: PEP 503 HTML and PEP 691 JSON of the same listing.

Both describe the same files with the same relative URLs, so a page and its JSON twin can be served
from one folder (``index.html`` and ``index.v1.json``): pip and uv ask for JSON by ``Accept`` and get
PEP 658/714 metadata hashes and sizes without opening the HTML (the public channels' edge picks the
object by that header; the private proxy serves HTML).

A wheel with a signed provenance envelope beside it (``<wheel>.provenance.json``, wheelfoundry.publishing.provenance)
gets ``data-wf-provenance="<url>"`` (JSON: ``"wf-provenance"``). Not PEP 740's ``data-provenance``: that
URL must serve a PEP 740 provenance object, whose attestations carry a Sigstore certificate and
transparency-log entries; ours is a DSSE envelope signed by the stack's KMS key, which a PEP 740 client
would (rightly) reject.
"""

from __future__ import annotations

import hashlib
import html
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from packaging.utils import canonicalize_name, parse_wheel_filename

from wheelfoundry.publishing import edge as edges
from wheelfoundry.publishing.provenance import SUFFIX as PROVENANCE_SUFFIX

HTML_TYPE = "text/html; charset=utf-8"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"  # PEP 691
API_VERSION = "1.1"  # PEP 700: "versions" and each file's "size"
JSON_PAGE = "index.v1.json"


@dataclass(frozen=True)
class IndexFile:
    filename: str
    sha256: str
    requires_python: str | None
    metadata_sha256: str | None
    provenance: bool = False
    variants: tuple[str, ...] = ()  # torch-2.13.0+cpu: the (torch, CUDA) indexes that list a per-cell wheel
    size: int | None = None  # bytes; PEP 700 asks for it in JSON pages
    yanked: str | None = None  # PEP 592: withdrawn (the reason; "" for none given), skipped unless pinned
    requires_torch: str | None = None  # its METADATA's torch requirement: the pin a per-cell wheel carries


def _page(title: str, links: list[str]) -> str:
    body = "\n".join(links)
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n"
        f'<meta name="pypi:repository-version" content="{API_VERSION}">\n'
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


def _href(channel: str, f: IndexFile, up: str, suffix: str = "") -> str:
    project = canonicalize_name(parse_wheel_filename(f.filename)[0])
    return f"{up}wheels/{quote(channel)}/{quote(project)}/{quote(f.filename + suffix)}"


def _links(channel: str, files: list[IndexFile], up: str) -> list[str]:
    links = []
    for f in sorted(files, key=lambda f: f.filename):
        attrs = [f'href="{html.escape(_href(channel, f, up))}#sha256={f.sha256}"']
        if f.requires_python:
            attrs.append(f'data-requires-python="{html.escape(f.requires_python)}"')
        if f.metadata_sha256:
            # PEP 714 spells it data-core-metadata; older pip reads data-dist-info-metadata.
            attrs.append(f'data-core-metadata="sha256={f.metadata_sha256}"')
            attrs.append(f'data-dist-info-metadata="sha256={f.metadata_sha256}"')
        if f.provenance:
            attrs.append(f'data-wf-provenance="{html.escape(_href(channel, f, up, PROVENANCE_SUFFIX))}"')
        if f.yanked is not None:
            attrs.append(f'data-yanked="{html.escape(f.yanked)}"')
        links.append(f"<a {' '.join(attrs)}>{html.escape(f.filename)}</a><br/>")
    return links


def _dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def render_root_json(projects: list[str]) -> str:
    return _dump({"meta": {"api-version": API_VERSION}, "projects": [{"name": p} for p in sorted(projects)]})


def render_project_json(channel: str, project: str, files: list[IndexFile], up: str = "../../../") -> str:
    """PEP 691's project detail, with PEP 700's versions and sizes; URLs relative to the page, as in HTML."""
    entries = []
    for f in sorted(files, key=lambda f: f.filename):
        entry: dict[str, Any] = {
            "filename": f.filename,
            "url": _href(channel, f, up),
            "hashes": {"sha256": f.sha256},
            "size": f.size,
        }
        if f.requires_python:
            entry["requires-python"] = f.requires_python
        if f.metadata_sha256:
            entry["core-metadata"] = {"sha256": f.metadata_sha256}
            entry["data-dist-info-metadata"] = {"sha256": f.metadata_sha256}
        if f.provenance:
            entry["wf-provenance"] = _href(channel, f, up, PROVENANCE_SUFFIX)
        if f.yanked is not None:
            entry["yanked"] = f.yanked or True  # PEP 691: a reason string, or true
        entries.append(entry)
    versions = sorted({str(parse_wheel_filename(f.filename)[1]) for f in files})
    return _dump({"meta": {"api-version": API_VERSION}, "name": project, "files": entries, "versions": versions})


class Pages:
    """Writes a publish's pages and remembers each one's sha256, so the next publish knows what changed."""

    def __init__(self, s3: Any, bucket: str) -> None:
        self.s3, self.bucket = s3, bucket
        self.digests: dict[str, str] = {}

    def put(self, key: str, body: str, content_type: str) -> None:
        data = body.encode()
        self.s3.put_object(
            Bucket=self.bucket, Key=key, Body=data, ContentType=content_type, CacheControl=edges.PAGE_CACHE
        )
        if not key.endswith("/"):
            self.digests[key] = hashlib.sha256(data).hexdigest()

    def folder(self, prefix: str, html_body: str, json_body: str) -> None:
        for key in (f"{prefix}index.html", prefix):
            self.put(key, html_body, HTML_TYPE)
        self.put(f"{prefix}{JSON_PAGE}", json_body, JSON_TYPE)

    def changed(self, before: dict[str, str]) -> list[str]:
        return sorted(k for k, digest in self.digests.items() if before.get(k) != digest)
