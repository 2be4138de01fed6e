"""Subscriptions: packages the stack follows, kept as ``subscriptions/<name>.json`` in its bucket.

A subscription names a package, its source (a PyPI sdist by release or "latest", a git URL and ref, or an
sdist in the bucket), a torch range (PEP 440), CUDA variants ("all", "all-cuda" or a list), Pythons,
platforms, and the extension request's own build fields (build_env, test, layout, channel ...). Its schema
(data/subscription.schema.json) takes those fields from request.schema.json, so a subscription is checked by
the very definitions a request is; the watcher (wheelfoundry.watch.watcher) turns it into requests that Validate
checks again in full.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from referencing import Registry, Resource

from wheelfoundry.catalog.catalog import Catalog
from wheelfoundry.config import FarmConfig
from wheelfoundry.errors import Issue, RequestInvalid, SubscriptionInvalid
from wheelfoundry.request.request import load_schema, parse_request, shape_issues
from wheelfoundry.request.semantics import STABLE_ABI_FROM, stable_abi_issues

PREFIX = "subscriptions/"
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")  # the schema's name pattern
# The extension request's fields a subscription passes on to every request it starts, as it states them.
PASSED_ON = (
    *("arch_list", "build_env", "test", "torch_index", "local_version", "layout", "abi", "abi_build"),
    *("require_all_cells", "options"),
)


@cache
def load_subscription_schema() -> dict[str, Any]:
    text = resources.files("wheelfoundry").joinpath("data/subscription.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def _validator() -> jsonschema.protocols.Validator:
    request = load_schema()
    registry: Registry[Any] = Registry().with_resource(request["$id"], Resource.from_contents(request))
    return jsonschema.Draft202012Validator(load_subscription_schema(), registry=registry)


@dataclass(frozen=True)
class Subscription:
    name: str
    package: str
    source: Mapping[str, str]  # {"pypi": "latest"|release} | {"git", "ref", "subdirectory"?} | {"s3"}
    torch: SpecifierSet
    cuda: str | tuple[str, ...]  # "all", "all-cuda" or the variants ("cpu", "13.0")
    python: tuple[str, ...] | None  # None: every Python a release offers
    platforms: tuple[str, ...]
    channel: str
    passed_on: Mapping[str, Any]  # PASSED_ON fields the subscription states
    raw: Mapping[str, Any]

    @property
    def key(self) -> str:
        return key(self.name)

    @property
    def project(self) -> str:
        return canonicalize_name(self.package)

    def wants(self, variant: str) -> bool:
        """Whether ``variant`` (cpu, 13.0) is one this subscription asks for (where a release has it)."""
        if self.cuda == "all":
            return True
        if self.cuda == "all-cuda":
            return variant != "cpu"
        return variant in self.cuda


def key(name: str) -> str:
    return f"{PREFIX}{name}.json"


def parse_subscription(raw: Any) -> Subscription:
    """The typed subscription, or RequestInvalid naming every problem of its shape."""
    if not isinstance(raw, Mapping):
        raise SubscriptionInvalid([Issue("", f"a subscription is a JSON object, not {type(raw).__name__}", raw)])
    issues = shape_issues(raw, _validator())
    if (shape := _source_shape(raw.get("source"))) is not None:
        issues = [shape, *(i for i in issues if not i.path.startswith("source"))]
    torch: SpecifierSet | None = None
    if isinstance(raw.get("torch"), str) and not any(i.path == "torch" for i in issues):
        try:
            torch = SpecifierSet(raw["torch"])
        except InvalidSpecifier as exc:
            issues.append(Issue("torch", f"{raw['torch']!r} is not a PEP 440 specifier set: {exc}", raw["torch"]))
    if issues or torch is None:
        raise SubscriptionInvalid({(i.path, i.message): i for i in issues}.values())
    cuda = raw.get("cuda", "all")
    return Subscription(
        name=str(raw.get("name") or canonicalize_name(raw["package"]))[:40],
        package=str(raw["package"]),
        source=dict(raw["source"]),
        torch=torch,
        cuda=cuda if isinstance(cuda, str) else tuple(cuda),
        python=tuple(raw["python"]) if raw.get("python") else None,
        platforms=tuple(raw.get("platforms") or ("x86_64",)),
        channel=str(raw.get("channel") or "extensions"),
        passed_on={k: raw[k] for k in PASSED_ON if k in raw},
        raw=dict(raw),
    )


SOURCES = ('{"pypi": "latest"}', '{"pypi": "2.1.2"}', '{"git": URL, "ref": REF}', '{"s3": "s3://<bucket>/sources/..."}')


def _source_shape(source: Any) -> Issue | None:
    """One problem for a source that fits none of the three shapes (the schema would name a branch's detail)."""
    if not isinstance(source, Mapping):
        return None
    kinds = [k for k in ("pypi", "git", "s3") if k in source]
    if len(kinds) == 1 and (kinds != ["git"] or "ref" in source):
        return None
    why = "give exactly one of pypi, git (with ref) or s3" if kinds else "name where the package comes from"
    return Issue("source", why, dict(source), SOURCES)


def sample_issues(sub: Subscription, catalog: Catalog, config: FarmConfig) -> list[Issue]:
    """What Validate would refuse in every request of this subscription, whatever the release: its build
    fields checked in a request for the newest catalog release in its range (the per-release fields, torch,
    cuda and python, are the watcher's to choose, so their findings are left out)."""
    releases = [r for r in catalog.releases if sub.torch.contains(r.latest_patch())] or [catalog.newest_release()]
    newest = max(releases, key=lambda r: tuple(int(p) for p in r.torch.split(".")))
    cuda = [c for c in newest.cuda if sub.wants(c)][:1] or (["cpu"] if sub.wants("cpu") else list(newest.cuda[:1]))
    request = {
        "framework": "extension",
        "name": sub.package,
        "source": {"s3": "s3://bucket/sources/sample-1.0.tar.gz"} if "pypi" in sub.source else dict(sub.source),
        "torch": [newest.torch],
        "cuda": cuda or ["cpu"],
        "python": [newest.python[-1]],
        "platforms": list(sub.platforms),
        "channel": sub.channel,
        **sub.passed_on,
    }
    # a new version of the package is requested for every release in range: one before the stable ABI is refused
    in_range = {r.torch: r.latest_patch() for r in releases}
    fix = f": narrow torch to >={STABLE_ABI_FROM}"
    issues = stable_abi_issues(sub.passed_on.get("abi"), in_range, "the torch range also admits", fix)
    try:
        parse_request(request, catalog, config)
    except RequestInvalid as exc:
        return issues + [i for i in exc.issues if i.path.split("[")[0].split(".")[0] not in ("torch", "cuda", "python")]
    return issues
