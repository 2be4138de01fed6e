"""Published wheels: the channel's index pages, a run's wheels, downloads checked against the index and signature."""

from __future__ import annotations

import html
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol
from urllib.parse import unquote

from packaging.utils import canonicalize_name

from wheelfoundry.publishing.provenance import SUFFIX
from wheelfoundry_user import NotFound, NotReady
from wheelfoundry_user.farm import Farm
from wheelfoundry_user.trust import Keyring, check_digest


class Store(Protocol):
    """Where a channel's files are read from: the stack's bucket (Farm) or a public site (PublicIndex)."""

    def get(self, key: str) -> bytes | None: ...

    def keys(self, prefix: str, delimiter: str | None = None) -> list[str]: ...

    def stream(self, key: str, into: IO[bytes]) -> tuple[str, int] | None: ...


LINK = re.compile(r'<a href="([^"]+)"[^>]*>([^<]+)</a>')
CHANNEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class IndexedWheel:
    channel: str
    project: str
    filename: str
    sha256: str

    @property
    def key(self) -> str:
        return f"wheels/{self.channel}/{self.project}/{self.filename}"


def channels(farm: Store) -> list[str]:
    return sorted(p[len("simple/") :].rstrip("/") for p in farm.keys("simple/", delimiter="/"))


def _check_channel(farm: Store, channel: str) -> None:
    if not CHANNEL.fullmatch(channel) or farm.get(f"simple/{channel}/index.html") is None:
        known = ", ".join(channels(farm)) or "none yet"
        raise NotFound(f"no channel {channel!r} in the index (channels: {known})")


def indexed(farm: Store, channel: str, package: str | None = None) -> list[IndexedWheel]:
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


@dataclass(frozen=True)
class Expect:
    """What fetch checks beyond the index: the signature (None: --no-verify) and the user's expectations."""

    keys: Keyring | None
    source: str | None = None
    builder: str | None = None


def download(farm: Store, wheel: IndexedWheel, dest: Path, expect: Expect) -> dict[str, Any]:
    """One wheel into ``dest``, only once it passed; a refused wheel leaves no file there.

    The bytes go to a hidden temporary file in ``dest`` (the same file system, so the final rename is
    atomic); the sha256 of those bytes is checked against the index and, unless --no-verify, against the
    signed statement. Only then does the file get its name, with its envelope beside it.
    """
    dest.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"filename": wheel.filename, "path": str(dest / wheel.filename), "verified": False}
    with tempfile.NamedTemporaryFile(dir=dest, prefix=f".{wheel.filename}.", suffix=".part", delete=False) as tmp:
        try:
            got = farm.stream(wheel.key, tmp)
        except BaseException:
            Path(tmp.name).unlink(missing_ok=True)
            raise
    part = Path(tmp.name)
    try:
        reason, envelope = _refusal(farm, wheel, got, expect)
        if reason is not None:
            return {**out, "refused": reason}
        assert got is not None
        if envelope is not None:
            (dest / f"{wheel.filename}{SUFFIX}").write_bytes(envelope)
        os.replace(part, dest / wheel.filename)
    finally:
        part.unlink(missing_ok=True)
    return {**out, "size": got[1], "sha256": got[0], "verified": expect.keys is not None}


def _refusal(
    farm: Store, wheel: IndexedWheel, got: tuple[str, int] | None, expect: Expect
) -> tuple[str | None, bytes | None]:
    """Why this download may not be kept (None: it may), and the envelope that vouched for it."""
    if got is None:
        return f"{wheel.key} is listed in the index but not in the bucket", None
    if not wheel.sha256 or got[0] != wheel.sha256:
        return f"sha256 {got[0]} differs from the index's {wheel.sha256 or 'none'}", None
    if expect.keys is None:
        return None, None
    envelope = farm.get(wheel.key + SUFFIX)
    if envelope is None:
        return f"no provenance ({wheel.filename}{SUFFIX} not in the bucket): unsigned", None
    verdict = check_digest(wheel.filename, got[0], envelope, expect.keys, expect.source, None, expect.builder)
    return (None, envelope) if verdict.ok else (verdict.reason, None)
