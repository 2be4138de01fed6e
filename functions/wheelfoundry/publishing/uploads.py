"""Upload signed wheels to an index with twine: what goes, what is skipped, what is refused, and why.

Shared by the Upload state (wheelfoundry.aws.uploads) and `wheelfoundry publish`. The rules, in order:
a wheel without valid signed provenance is refused (Attest signs only wheels whose published bytes
passed their tests); one over the target's per-file limit is refused, naming the limit and the ways
out; one already on the index with the same sha256 is skipped; one there with another sha256 is
refused (an index never replaces a file: PyPI forbids re-uploading a file name even after deletion).
Everything else goes in one `twine upload`, the standard client, with the token in its environment.

Attestations: PyPI's PEP 740 accepts only Sigstore-signed attestations from a Trusted Publishing
identity (a CI workflow's OIDC token). The farm signs with its stack's KMS key, which PyPI cannot
verify, so nothing is uploaded as PEP 740 (no `twine --attestations`); the provenance stays in the
stack's bucket and `wheelfoundry verify --provenance` checks a wheel downloaded back from the index.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from base64 import b64encode
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from wheelfoundry.errors import PublishFailed
from wheelfoundry.request.publish_targets import PublishTarget, local_label, over_limit

SIMPLE_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"  # PEP 691, else PEP 503 HTML
TWINE_TIMEOUT_SECONDS = 840  # inside the Upload function's 900 s


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    def header(self) -> str:
        return "Basic " + b64encode(f"{self.username}:{self.password}".encode()).decode()


@dataclass(frozen=True)
class Candidate:
    filename: str
    sha256: str
    size: int
    unverified: str | None  # None: valid signed provenance; else why not


@dataclass(frozen=True)
class Outcome:
    filename: str
    action: str  # upload | uploaded | skipped | refused
    reason: str

    def line(self) -> str:
        return f"{self.action.upper():8} {self.filename}: {self.reason}"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.files: dict[str, str | None] = {}
        self._href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""

    def handle_data(self, data: str) -> None:
        if self._href is not None and data.strip():
            _, _, digest = self._href.partition("#sha256=")
            self.files[data.strip()] = digest or None
            self._href = None


def present_files(index_url: str, project: str, auth: Credentials | None) -> dict[str, str | None]:
    """{file name: sha256 or None} of a project on the index (PEP 691 JSON or PEP 503 HTML); {} if new."""
    url = index_url.rstrip("/") + f"/{canonicalize_name(project)}/"
    headers = {"Accept": SIMPLE_ACCEPT, **({"Authorization": auth.header()} if auth else {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as response:  # noqa: S310 - the target's own index
            body, kind = response.read(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return {}
        raise PublishFailed(f"{url}: HTTP {exc.code} {exc.reason} (reading which files the index already has)") from exc
    except OSError as exc:
        raise PublishFailed(f"{url}: {exc} (reading which files the index already has)") from exc
    if "json" in kind:
        files = json.loads(body).get("files") or []
        return {f["filename"]: (f.get("hashes") or {}).get("sha256") for f in files}
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    return parser.files


def decide(
    candidates: Iterable[Candidate], present: Callable[[str], dict[str, str | None]], target: PublishTarget
) -> list[Outcome]:
    """Each wheel's fate before anything is uploaded; `present(project)` lists the index's files."""
    seen: dict[str, dict[str, str | None]] = {}
    out = []
    for wheel in candidates:
        if wheel.unverified is not None:
            out.append(Outcome(wheel.filename, "refused", f"no valid signed provenance: {wheel.unverified}"))
            continue
        if (why := local_label(wheel.filename, target) or over_limit(wheel.filename, wheel.size, target)) is not None:
            out.append(Outcome(wheel.filename, "refused", why))
            continue
        project = canonicalize_name(parse_wheel_filename(wheel.filename)[0])
        if project not in seen:
            seen[project] = present(project)
        if wheel.filename not in seen[project]:
            out.append(Outcome(wheel.filename, "upload", f"sha256:{wheel.sha256[:16]}..., {wheel.size / 1e6:.2f} MB"))
            continue
        there = seen[project][wheel.filename]
        if there == wheel.sha256:
            out.append(Outcome(wheel.filename, "skipped", f"already on {target.name} with the same sha256"))
        else:
            why = (
                f"already on {target.name} with sha256 {there or 'unknown'}, this build's is {wheel.sha256}: "
                "an index never replaces a file; raise the version (or local_version) and publish again"
            )
            out.append(Outcome(wheel.filename, "refused", why))
    return out


def twine_upload(files: list[Path], upload_url: str, auth: Credentials | None) -> str:
    """`twine upload` of these files; its output. The token goes through the environment, never argv."""
    if not files:
        return ""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TWINE_")}
    # The child sees this interpreter's modules (on Lambda: twine in the layer's /opt/python), asks no
    # keyring (the token is given) and writes nothing outside /tmp.
    env |= {
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring",
    }
    env.setdefault("HOME", tempfile.gettempdir())
    env |= {"TWINE_NON_INTERACTIVE": "1", "TWINE_USERNAME": auth.username if auth else "__token__"}
    env["TWINE_PASSWORD"] = auth.password if auth else "none"  # an index without auth ignores both
    argv = [sys.executable, "-m", "twine", "upload", "--disable-progress-bar", "--repository-url", upload_url]
    try:
        done = subprocess.run(
            [*argv, *map(str, files)], env=env, capture_output=True, text=True, timeout=TWINE_TIMEOUT_SECONDS
        )
    except subprocess.TimeoutExpired as exc:
        raise PublishFailed(f"twine upload to {upload_url} ran past {TWINE_TIMEOUT_SECONDS} s") from exc
    output = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        tail = " | ".join(line.strip() for line in output.splitlines()[-6:] if line.strip())
        raise PublishFailed(f"twine upload to {upload_url} failed (exit {done.returncode}): {tail}")
    return output


def publish(
    candidates: list[Candidate],
    path_of: Callable[[str], Path],
    target: PublishTarget,
    upload_url: str,
    index_url: str,
    auth: Credentials | None,
) -> list[Outcome]:
    """Decide, then upload what may go (one twine call); the outcome of every wheel."""
    outcomes = decide(candidates, lambda project: present_files(index_url, project, auth), target)
    going = [o.filename for o in outcomes if o.action == "upload"]
    twine_upload([path_of(name) for name in going], upload_url, auth)
    return [Outcome(o.filename, "uploaded", o.reason) if o.action == "upload" else o for o in outcomes]
