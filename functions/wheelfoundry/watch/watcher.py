"""One watcher tick, pure: subscriptions + what upstream published + what the channels serve -> runs to start.

For each subscription: the package version it follows (a PyPI sdist, "latest" or pinned; a git ref; an sdist
in the bucket), the torch releases its range covers (one cell per torch *minor*, wheelfoundry.publishing.coverage), the
variants and Pythons each release was published for (the catalog's row, else facts derived from the wheels,
wheelfoundry.catalog.derived), the cells the channel lacks. A variant whose toolkit has no lock in this deployment,
or no catalog entry, is reported by name and left out; the rest is built. The missing cells go into one
request per (subscription, release): a package version the channel has no wheel of yet is one release (all
its cells, every covered torch); otherwise each torch release is. ``exclude`` (wheelfoundry.request.exclusions) makes
the request ask for exactly those cells. Each request is planned here with the stack's guardrails, as
Validate will plan it; one the planner refuses is reported, not started.

The execution name derives from the subscription, the release and the cells (``w-torch-scatter-2.1.2-pt215-
<hash>``): Step Functions refuses a second execution of one name (for 90 days), so a second tick starts
nothing while the first run builds; once it published, the cells are no longer missing. Cells a run failed
to publish form a new set, and a new name: they are tried once more, then left for the maintainer (status).

Release day without a compile: a new torch's cells that a published stable-ABI wheel of the package may serve
(its CUDA major, a floor at or below the release: Coverage.stable_wheel) are first a *retest* run. It builds
nothing: its test jobs install that wheel, as published, in the new torch's environments, and only if it
passes there is the torch added to the wheel's record (index pages, a signed test result). The retest's Start
carries the build it falls back to (``fallback``): once the retest ended and the cells are still missing, the
next tick starts the build instead (aws.watch). A subscription with ``abi: per-torch`` is always built.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from wheelfoundry.catalog.catalog import Catalog
from wheelfoundry.catalog.derived import DerivedRelease, with_derived
from wheelfoundry.catalog.upstream_index import TorchRelease, label_of
from wheelfoundry.config import FarmConfig
from wheelfoundry.errors import RequestInvalid
from wheelfoundry.planning.jobs import StackContext
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.publishing.coverage import Coverage
from wheelfoundry.request import exclusions
from wheelfoundry.request.request import parse_request
from wheelfoundry.watch.subscriptions import Subscription
from wheelfoundry.watch.watch_facts import PackageRelease, ReleaseFacts, lock_problem, release_facts, resolve_source

Cell = exclusions.Cell


@dataclass(frozen=True)
class Upstream:
    """What the tick read: torch's releases, each pypi-sourced package's sdists, what could not be read."""

    torch: tuple[TorchRelease, ...]
    packages: Mapping[str, tuple[PackageRelease, ...]] = field(default_factory=dict)
    pytorch_index_read: bool = True
    problems: tuple[str, ...] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)  # torch version -> its PyPI Linux wheel's METADATA


@dataclass(frozen=True)
class Stack:
    bucket: str
    catalog: Catalog
    config: FarmConfig  # with the stack's guardrails
    locks: Mapping[str, bool] | None  # "13.0-x86_64" -> has a compiler; None: the deployment does not say
    context: StackContext = field(default_factory=StackContext)
    notes: Mapping[str, str] = field(default_factory=dict)  # "13.2-x86_64" -> why not yet (watch_facts.lock_problem)


@dataclass(frozen=True)
class Start:
    subscription: str
    name: str  # the execution name
    reason: str
    request: dict[str, Any]
    cells: tuple[Cell, ...]
    copy: PackageRelease | None  # a PyPI sdist to put at request.source.s3 first
    plan: dict[str, Any]  # the plan's summary (jobs, wall hours, cost)
    fallback: Start | None = None  # a retest's build: started once the retest ended and the cells still lack a wheel


@dataclass
class Outcome:
    """One subscription's tick, for status and the tick record."""

    subscription: str
    package: str
    version: str | None = None
    releases: list[str] = field(default_factory=list)  # torch releases in range
    ignored: list[str] = field(default_factory=list)  # outside the range
    covered: int = 0
    missing: int = 0
    starts: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # torch version -> {"served", "missing": cell counts, "run": the run for the missing ones (or why none),
    # "not_built": why a variant's cells are left out}: `subscriptions list` shows it per release
    by_release: dict[str, dict[str, Any]] = field(default_factory=dict)
    planned: list[Start] = field(default_factory=list, repr=False)


@dataclass
class Tick:
    starts: list[Start] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    derived: list[DerivedRelease] = field(default_factory=list)  # facts of the releases the catalog lacks


def execution_name(subscription: str, release: str, cells: Sequence[Cell], kind: str = "") -> str:
    """``w-<subscription>-<release>-<hash of the cells>``: at most 80 characters of [A-Za-z0-9-_]; ``kind``
    ("retest") gives the same cells another name."""
    text = "\n".join(["|".join(c) for c in sorted(cells)] + ([kind] if kind else []))
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    release = re.sub(r"[^A-Za-z0-9_-]", "-", release)[:24]
    return f"w-{subscription[:40]}-{release}-{digest}"


def _cells(sub: Subscription, facts: ReleaseFacts, stack: Stack, unbuildable: dict[str, list[str]]) -> list[Cell]:
    """The subscription's cells of one release; a variant this deployment cannot build goes to ``unbuildable``
    (why -> the torch releases that need it), never into a request."""
    cells = []
    for platform in sub.platforms:
        for variant in facts.variants.get(platform, ()):
            if not sub.wants(variant):
                continue
            if variant != "cpu" and (why := lock_problem(variant, platform, stack.catalog, stack.locks, stack.notes)):
                unbuildable.setdefault(why, []).append(facts.version)
                continue
            for python in facts.python:
                if sub.python is None or python in sub.python:
                    cells.append((facts.spec, variant, python, platform))
    return cells


def _request(sub: Subscription, source: Mapping[str, str], cells: list[Cell], per_cell: bool) -> dict[str, Any]:
    torch = sorted({c[0] for c in cells}, key=Version)
    cuda = sorted({c[1] for c in cells}, key=lambda v: (v != "cpu", Version(v) if v != "cpu" else Version("0")))
    python = sorted({c[2] for c in cells}, key=Version)
    platforms = sorted({c[3] for c in cells})
    (torch, cuda, python, platforms), exclude = exclusions.cover(set(cells), (torch, cuda, python, platforms))
    request: dict[str, Any] = {
        "framework": "extension",
        "name": sub.package,
        "source": dict(source),
        "torch": torch,
        "cuda": cuda,
        "python": python,
        "platforms": platforms,
        "channel": sub.channel,
        **sub.passed_on,
    }
    if exclude:
        request["exclude"] = exclude
    if per_cell:  # a published wheel's name never gets other bytes: the added cells get names of their own
        request.update(layout="per-cell", local_version=True)
    return request


def _plan(request: dict[str, Any], stack: Stack) -> dict[str, Any]:
    plan = plan_request(parse_request(request, stack.catalog, stack.config), stack.catalog, stack.config, stack.context)
    return {**plan.summary(), "cells": sum(len(j.extension.cells) for j in plan.jobs if j.extension)}


def _follow(sub: Subscription, upstream: Upstream, coverage: Coverage, stack: Stack, planner: Stack) -> Outcome:
    outcome = Outcome(sub.name, sub.package)
    resolved = resolve_source(sub, upstream.packages, stack.bucket)
    if isinstance(resolved, str):
        outcome.problems.append(resolved)
        return outcome
    source, version, copy = resolved
    outcome.version = version
    by_release: dict[str, list[Cell]] = {}
    unbuildable: dict[str, list[str]] = {}
    for release in upstream.torch:
        facts = release_facts(release, sub.torch, stack.catalog, upstream.pytorch_index_read)
        if facts is None:
            outcome.ignored.append(release.version)
            continue
        outcome.releases.append(facts.version)
        outcome.problems += facts.problems
        here = outcome.by_release.setdefault(facts.version, {"served": 0, "missing": 0, "not_built": []})
        for cell in _cells(sub, facts, stack, unbuildable):
            variant = label_of(None if cell[1] == "cpu" else cell[1])
            if coverage.has(sub.package, version, cell[2], cell[3], facts.minor, variant):
                outcome.covered += 1
                here["served"] += 1
            else:
                by_release.setdefault(facts.version, []).append(cell)
                here["missing"] += 1
        here["not_built"] = [why for why, versions in unbuildable.items() if facts.version in versions]
    for why, releases in unbuildable.items():  # "CUDA 13.2: no lock for x86_64 (torch 2.14.1, 2.15.0); run ..."
        what, _, fix = why.partition("; ")
        outcome.problems.append(f"{what} (torch {', '.join(dict.fromkeys(releases))}): its cells are not built; {fix}")
    outcome.missing = sum(len(c) for c in by_release.values())
    if not by_release:
        return outcome
    published = coverage.has_version(sub.package, version)
    label = version or "source"
    groups = {f"{label}-pt{''.join(r.split('.')[:2])}": (f"torch {r} released", c) for r, c in by_release.items()}
    if not published:  # a new package version: one run for all its cells, every covered torch
        every = [c for cells in by_release.values() for c in cells]
        groups = {label: (f"{sub.package} {label}: no wheel of it in channel {sub.channel} yet", every)}
    for name_part, (reason, cells) in sorted(groups.items()):
        retests, cells = _retestable(sub, version, cells, coverage) if published else ({}, cells)
        for key, retest in sorted(retests.items()):
            build = _start(sub, source, retest, name_part, reason, copy, planner, outcome, per_cell=True)
            if build is None:  # a retest that fails would leave its cells with no build: named, not started
                continue
            request = {**_request(sub, source, retest, per_cell=True), "abi": "stable", "retest": [key]}
            why = f"{reason}: {key.rsplit('/', 1)[1]} (stable ABI) is tested there first, with no build"
            name = execution_name(sub.name, name_part, retest, "retest")
            _add(outcome, Start(sub.name, name, why, request, tuple(sorted(retest)), None, {}, build), planner)
        if cells:
            _start(sub, source, cells, name_part, reason, copy, planner, outcome, published, add=True)
    return outcome


def _retestable(
    sub: Subscription, version: str | None, cells: list[Cell], coverage: Coverage
) -> tuple[dict[str, list[Cell]], list[Cell]]:
    """({published stable wheel's key: the cells it may serve}, the cells none may) of one release's cells."""
    if sub.passed_on.get("abi") == "per-torch":
        return {}, cells
    wheels: dict[str, list[Cell]] = {}
    rest = []
    for cell in cells:
        minor = f"{Version(cell[0]).major}.{Version(cell[0]).minor}"
        label = label_of(None if cell[1] == "cpu" else cell[1])
        found = coverage.stable_wheel(sub.package, version, cell[2], cell[3], minor, label)
        if found is None:
            rest.append(cell)
        else:
            wheels.setdefault(found.key, []).append(cell)
    return wheels, rest


def _start(
    sub: Subscription,
    source: Mapping[str, str],
    cells: list[Cell],
    name_part: str,
    reason: str,
    copy: PackageRelease | None,
    planner: Stack,
    outcome: Outcome,
    per_cell: bool,
    add: bool = False,
) -> Start | None:
    """The build of ``cells`` (added to the outcome with ``add``, else a retest's fallback)."""
    request = _request(sub, source, cells, per_cell=per_cell)
    start = Start(sub.name, execution_name(sub.name, name_part, cells), reason, request, tuple(sorted(cells)), copy, {})
    return _add(outcome, start, planner) if add else _planned(start, planner, outcome)


def _planned(start: Start, planner: Stack, outcome: Outcome) -> Start | None:
    try:
        return replace(start, plan=_plan(start.request, planner))
    except RequestInvalid as exc:  # GuardrailExceeded and the rest: named, never started
        outcome.problems.append(f"{start.name}: not started, {type(exc).__name__}: {exc}")
        for version in {c[0] for c in start.cells}:
            outcome.by_release[version]["run"] = f"{start.name}: not started, {type(exc).__name__}"
        return None


def _add(outcome: Outcome, start: Start, planner: Stack) -> Start | None:
    for version in {c[0] for c in start.cells}:  # a cell names its release as the outcome keys it (facts.version)
        outcome.by_release[version]["run"] = start.name
    planned = _planned(start, planner, outcome)
    if planned is not None:
        outcome.starts.append(start.name)
        outcome.planned.append(planned)
    return planned


def toolkits_needed(
    subscriptions: Sequence[Subscription], upstream: Upstream, stack: Stack
) -> dict[tuple[str, str], list[str]]:
    """(CUDA, platform) -> the torch versions (newest first) of the cells the subscriptions want that lack a
    toolkit the watcher can lock itself: CUDA 13 and later (its compiler is on PyPI; 11/12 take NVIDIA's redist
    archives, pinned by hand), with no lock in the deployment or no catalog row, and no note about it yet."""
    found: dict[tuple[str, str], list[str]] = {}
    for sub in subscriptions:
        for release in upstream.torch:
            facts = release_facts(release, sub.torch, stack.catalog, upstream.pytorch_index_read)
            cells = [(c, p) for p in sub.platforms for c in (facts.variants.get(p, ()) if facts else ())]
            for cuda, platform in cells:
                name = f"{cuda}-{platform}"
                if cuda == "cpu" or not sub.wants(cuda) or name in stack.notes or Version(cuda).major < 13:
                    continue
                if facts and (cuda not in stack.catalog.cuda or (stack.locks is not None and name not in stack.locks)):
                    found.setdefault((cuda, platform), []).append(facts.version)
    return {k: sorted(set(v), key=Version, reverse=True) for k, v in found.items()}


def tick(
    subscriptions: Sequence[Subscription], upstream: Upstream, coverage: Mapping[str, Coverage], stack: Stack
) -> Tick:
    """The runs to start for ``subscriptions``; ``coverage``: channel -> what its wheels serve."""
    result = Tick()
    newest = Version(stack.catalog.newest_release().torch)
    for release in upstream.torch:  # the catalog lacks it: its facts, from the wheels, for Validate too
        if stack.catalog.release(release.minor) is None and Version(release.minor) > newest:
            facts = release_facts(release, SpecifierSet(), stack.catalog, upstream.pytorch_index_read)
            if facts is not None and facts.derived is not None:
                result.derived.append(facts.derived)
    planner = replace(stack, catalog=with_derived(stack.catalog, result.derived))
    for sub in sorted(subscriptions, key=lambda s: s.name):
        outcome = _follow(sub, upstream, coverage.get(sub.channel, Coverage(())), stack, planner)
        outcome.problems = [*upstream.problems, *dict.fromkeys(outcome.problems)]
        result.outcomes.append(outcome)
        result.starts += outcome.planned
    return result
