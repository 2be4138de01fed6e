"""Published wheels: the channel's index pages, a run's wheels, downloads checked against the index."""

from __future__ import annotations

import hashlib
import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from packaging.utils import canonicalize_name

from wheelfoundry_user import NotFound, NotReady, UserError
from wheelfoundry_user.farm import Farm

LINK = re.compile(r'<a href="([^"]+)"[^>]*>([^<]+)</a>')
CHANNEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class ChecksumMismatch(UserError):
    """A downloaded wheel's sha256 differs from the index: the file is removed, exit 1."""


@dataclass(frozen=True)
class IndexedWheel:
    channel: str
    project: str
    filename: str
    sha256: str

    @property
    def key(self) -> str:
        return f"wheels/{self.channel}/{self.project}/{self.filename}"


def channels(farm: Farm) -> list[str]:
    return sorted(p[len("simple/") :].rstrip("/") for p in farm.keys("simple/", delimiter="/"))


def _check_channel(farm: Farm, channel: str) -> None:
    if not CHANNEL.fullmatch(channel) or farm.get(f"simple/{channel}/index.html") is None:
        known = ", ".join(channels(farm)) or "none yet"
        raise NotFound(f"no channel {channel!r} in the index (channels: {known})")


def indexed(farm: Farm, channel: str, package: str | None = None) -> list[IndexedWheel]:
    """The channel's wheels as its PEP 503 pages list them (the sha256 the index promises)."""
    _check_channel(farm, channel)
    root = (farm.get(f"simple/{channel}/index.html") or b"").decode()
    projects = [unquote(href).rstrip("/") for href, _ in LINK.findall(root)]
    if package is not None:
        wanted = canonicalize_name(package)
        projects = [p for p in projects if canonicalize_name(p) == wanted]
        if not projects:
            raise NotFound(f"no package {package!r} in channel {channel!r}")
    found = []
    for project in projects:
        page = (farm.get(f"simple/{channel}/{project}/index.html") or b"").decode()
        for href, name in LINK.findall(page):
            _, _, digest = html.unescape(href).partition("#sha256=")
            found.append(IndexedWheel(channel, project, html.unescape(name), digest))
    return found


def run_wheels(farm: Farm, run: str, package: str | None) -> list[IndexedWheel]:
    """The wheels a finished run published (its report, merge and each job's Collect)."""
    described = farm.describe(run)
    name = described["name"]
    if described["status"] == "RUNNING":
        raise NotReady(f"run {name} is still running; fetch it when `wheelfoundry status {name}` shows it ended")
    report = farm.get_json(f"runs/{name}/report.json")
    if report is None:
        raise NotFound(f"run {name} ({described['status']}) left no report.json: nothing was published")
    published = set((report.get("merge") or {}).get("published") or [])
    for job in report.get("jobs") or []:
        result = farm.get_json(f"runs/{name}/jobs/{job.get('job_id')}/result.json") or {}
        published |= set((result.get("collect") or {}).get("published") or [])
    wheels = [w for w in indexed(farm, report["channel"], package) if w.filename in published]
    if not wheels:
        raise NotFound(f"run {name} published no wheel" + (f" of {package}" if package else ""))
    return wheels


def download(farm: Farm, wheel: IndexedWheel, dest: Path) -> dict[str, Any]:
    body = farm.get(wheel.key)
    if body is None:
        raise NotFound(f"{wheel.key} is listed in the index but not in the bucket")
    digest = hashlib.sha256(body).hexdigest()
    if not wheel.sha256 or digest != wheel.sha256:
        raise ChecksumMismatch(f"{wheel.filename}: sha256 {digest} differs from the index's {wheel.sha256 or 'none'}")
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / wheel.filename
    target.write_bytes(body)
    return {"filename": wheel.filename, "path": str(target), "size": len(body), "sha256": digest, "verified": True}
