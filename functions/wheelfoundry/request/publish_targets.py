"""Where a run's wheels are uploaded: `options.publish` in a request, `wheelfoundry publish --to` on the
command line. PyPI, TestPyPI, an AWS CodeArtifact repository, or any index with the legacy upload API
that twine speaks (pypiserver, devpi, Artifactory, Nexus). One parser for both, so a mistake reads the
same wherever it is made: the field, the value, what is allowed.

Per-file limits: PyPI and TestPyPI refuse a file over 100 MB unless the project was granted more
(https://docs.pypi.org/project-management/storage-limits/); CodeArtifact's asset limit is 5 GB
(https://docs.aws.amazon.com/codeartifact/latest/ug/service-limits.html). `max_file_mb` states a raised
or an index's own limit; an upload URL has none unless it is given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from wheelfoundry.errors import Issue

KNOWN = {  # name -> (upload URL, simple index)
    "pypi": ("https://upload.pypi.org/legacy/", "https://pypi.org/simple/"),
    "testpypi": ("https://test.pypi.org/legacy/", "https://test.pypi.org/simple/"),
}
DEFAULT_LIMIT_MB = {"pypi": 100.0, "testpypi": 100.0, "codeartifact": 5000.0}
ALLOWED = ("pypi", "testpypi", "codeartifact:DOMAIN/REPOSITORY[@OWNER]", "https://... (an upload URL)")
OBJECT_KEYS = ("repository", "codeartifact", "url", "index_url", "max_file_mb")
# CodeArtifact's own name rules (CreateDomain, CreateRepository) and a 12-digit account id.
DOMAIN = re.compile(r"^[a-z][a-z0-9-]{1,48}[a-z0-9]$")
REPOSITORY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,99}$")
ACCOUNT = re.compile(r"^[0-9]{12}$")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
LIMIT_OPTIONS = (
    "a public channel of the stack (PublicChannels; no per-file limit, per-cell wheels too), fewer archs in "
    "arch_list, or a limit increase from the index (PyPI: https://github.com/pypi/support, then max_file_mb)"
)


@dataclass(frozen=True)
class CodeArtifactRepo:
    domain: str
    repository: str
    owner: str | None = None  # None: the account the credentials belong to


@dataclass(frozen=True)
class PublishTarget:
    kind: Literal["pypi", "testpypi", "codeartifact", "url"]
    url: str | None = None  # kind "url": the upload endpoint
    index_url: str | None = None  # kind "url": its simple index (default: <url>/simple/)
    codeartifact: CodeArtifactRepo | None = None
    max_file_mb: float | None = None  # None: the target's default limit

    @property
    def name(self) -> str:
        if self.codeartifact is not None:
            ca = self.codeartifact
            return f"codeartifact:{ca.domain}/{ca.repository}" + (f"@{ca.owner}" if ca.owner else "")
        return self.url if self.kind == "url" and self.url else self.kind

    @property
    def limit_mb(self) -> float | None:
        return self.max_file_mb if self.max_file_mb is not None else DEFAULT_LIMIT_MB.get(self.kind)

    def endpoints(self) -> tuple[str, str]:
        """(upload URL, simple index URL); CodeArtifact's come from its API (aws.uploads)."""
        if self.kind in KNOWN:
            return KNOWN[self.kind]
        if self.kind == "url" and self.url:
            return self.url, self.index_url or self.url.rstrip("/") + "/simple/"
        raise ValueError(f"{self.name}: the endpoint comes from CodeArtifact's GetRepositoryEndpoint")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "max_file_mb": self.max_file_mb}
        if self.kind == "url":
            out |= {"url": self.url, "index_url": self.index_url}
        if self.codeartifact is not None:
            ca = self.codeartifact
            out["codeartifact"] = {"domain": ca.domain, "repository": ca.repository, "owner": ca.owner}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PublishTarget:
        ca = data.get("codeartifact")
        return cls(
            kind=data["kind"],
            url=data.get("url"),
            index_url=data.get("index_url"),
            codeartifact=CodeArtifactRepo(ca["domain"], ca["repository"], ca.get("owner")) if ca else None,
            max_file_mb=data.get("max_file_mb"),
        )


def _url_issue(value: Any, path: str) -> Issue | None:
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("https", "http") or not parts.hostname:
        return Issue(path, f"{value!r} is not an upload URL", value, ALLOWED)
    if parts.scheme == "http" and parts.hostname not in LOOPBACK:
        # The token travels with every upload: in clear text only over the loopback interface.
        return Issue(path, f"{value!r}: http:// only to 127.0.0.1 or localhost; use https://", value, ("https://...",))
    if parts.username or parts.password:
        return Issue(path, "a URL with credentials in it: give the token through the secret instead", "<redacted>")
    return None


def _codeartifact(value: Any, path: str) -> tuple[CodeArtifactRepo | None, list[Issue]]:
    if not isinstance(value, Mapping):
        return None, [Issue(path, f"{value!r} is not an object", value, ("{domain, repository, owner}",))]
    issues = [
        Issue(f"{path}.{k}", f"unknown field {k!r}", k, ("domain", "repository", "owner"))
        for k in value
        if k not in ("domain", "repository", "owner")
    ]
    for key, pattern, hint in (
        ("domain", DOMAIN, "a CodeArtifact domain name (lowercase letters, digits, -)"),
        ("repository", REPOSITORY, "a CodeArtifact repository name"),
        ("owner", ACCOUNT, "the domain owner's 12-digit AWS account id"),
    ):
        item = value.get(key)
        if item is None and key == "owner":
            continue
        if not isinstance(item, str) or not pattern.fullmatch(item):
            issues.append(Issue(f"{path}.{key}", f"{item!r} is not valid: expected {hint}", item))
    if issues:
        return None, issues
    return CodeArtifactRepo(value["domain"], value["repository"], value.get("owner")), []


def parse_target(value: Any, path: str = "options.publish") -> tuple[PublishTarget | None, list[Issue]]:
    """A request's `options.publish` (a name or an object): the target, or every problem with it."""
    if value is None:
        return None, []
    if isinstance(value, str):
        if value in KNOWN:
            return PublishTarget(value), []  # type: ignore[arg-type]
        return None, [Issue(path, f"{value!r} is not a publish target", value, ALLOWED)]
    if not isinstance(value, Mapping):
        return None, [Issue(path, f"{value!r} has the wrong type: expected a name or an object", value, ALLOWED)]
    issues = [Issue(f"{path}.{k}", f"unknown field {k!r}", k, OBJECT_KEYS) for k in value if k not in OBJECT_KEYS]
    chosen = [k for k in ("repository", "codeartifact", "url") if k in value]
    if len(chosen) != 1:
        why = "give exactly one of 'repository', 'codeartifact' or 'url'"
        return None, [*issues, Issue(path, why, sorted(value), ("repository", "codeartifact", "url"))]
    limit = value.get("max_file_mb")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int | float) or not 0 < limit <= 5000):
        issues.append(
            Issue(f"{path}.max_file_mb", f"{limit!r} is not a size in MB", limit, ("0 < max_file_mb <= 5000",))
        )
    target: PublishTarget | None = None
    if chosen == ["repository"]:
        if value["repository"] not in KNOWN:
            allowed = tuple(KNOWN)
            issues.append(
                Issue(f"{path}.repository", f"{value['repository']!r} is not allowed", value["repository"], allowed)
            )
        else:
            target = PublishTarget(value["repository"], max_file_mb=limit)
    elif chosen == ["codeartifact"]:
        repo, problems = _codeartifact(value["codeartifact"], f"{path}.codeartifact")
        issues += problems
        target = PublishTarget("codeartifact", codeartifact=repo, max_file_mb=limit) if repo else None
    else:
        for key in ("url", "index_url"):
            if key in value and (problem := _url_issue(value[key], f"{path}.{key}")):
                issues.append(problem)
        target = PublishTarget("url", url=value["url"], index_url=value.get("index_url"), max_file_mb=limit)
    if "index_url" in value and chosen != ["url"]:
        issues.append(Issue(f"{path}.index_url", "index_url goes with url only", value["index_url"]))
    return (None, issues) if issues else (target, [])


def parse_to(spec: str, max_file_mb: float | None = None, index_url: str | None = None) -> PublishTarget:
    """`--to pypi|testpypi|codeartifact:DOMAIN/REPOSITORY[@OWNER]|URL` as the request's object would say it."""
    value: Any
    if spec.startswith("codeartifact:"):
        where, _, owner = spec.removeprefix("codeartifact:").partition("@")
        domain, _, repository = where.partition("/")
        value = {"codeartifact": {"domain": domain, "repository": repository, **({"owner": owner} if owner else {})}}
    elif spec in KNOWN:
        value = {"repository": spec}
    else:
        value = {"url": spec, **({"index_url": index_url} if index_url else {})}
    if max_file_mb is not None:
        value["max_file_mb"] = max_file_mb
    target, issues = parse_target(value, "--to")
    if target is None:
        from wheelfoundry.errors import RequestInvalid

        raise RequestInvalid(issues)
    return target


def over_limit(filename: str, size: int, target: PublishTarget) -> str | None:
    """Why this file may not go to the target (None: it fits)."""
    limit = target.limit_mb
    if limit is None or size <= limit * 1_000_000:
        return None
    return (
        f"{filename} is {size / 1e6:.4g} MB, over {target.name}'s per-file limit of {limit:g} MB; "
        f"options: {LIMIT_OPTIONS}"
    )


LOCAL_LABEL_ADVICE = (
    "PEP 440 local versions are not allowed there; serve per-cell wheels from a public channel (deploy with "
    "PublicChannels=<channel>; users: pip install NAME -f https://<domain>/simple/<channel>/torch-<X.Y.Z>+<cuda>.html)"
    ", or build the merged layout for PyPI"
)


def local_label(filename: str, target: PublishTarget) -> str | None:
    """Why a wheel with a local version label (``+pt211cu130``) may not go to PyPI or TestPyPI (None: it may)."""
    from packaging.utils import parse_wheel_filename

    version = parse_wheel_filename(filename)[1]
    if target.kind not in ("pypi", "testpypi") or version.local is None:
        return None
    return f"{filename} has the local version label +{version.local}, which {target.name} refuses: {LOCAL_LABEL_ADVICE}"
