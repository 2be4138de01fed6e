"""The watcher's tick on the stack: read what it needs, run the pure tick (wheelfoundry.watch.watcher), act on it.

Reads: the subscriptions (``subscriptions/*.json``), the channels' index states, the deployed bundle's toolkit
locks (bundles/current.json), PyPI's simple API for torch and each pypi-sourced package (PEP 691 JSON),
PyTorch's index for torch's variants, and the METADATA of a new release's PyPI wheel (PEP 658 where PyPI
offers it, else its JSON API). Writes: ``toolkits/`` (a CUDA toolkit lock the cells need and nothing locks,
wheelfoundry.aws.toolkits), ``watch/derived.json`` (facts of releases the catalog lacks, which Validate
reads), the sdist of a pypi source under ``sources/pypi/`` (its sha256 checked against PyPI's),
``watch/runs/<execution>.json`` (which subscription and release a run serves: Report notifies from it),
``watch/last-tick.json``; and starts the executions. An upstream index that cannot be read is named in the
tick's record; the tick goes on with what it could read.
"""

from __future__ import annotations

import hashlib
import json
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from wheelfoundry.aws import toolkits
from wheelfoundry.catalog import derived
from wheelfoundry.catalog.catalog import Catalog, load_catalog
from wheelfoundry.catalog.upstream_index import SIMPLE_JSON, html_files, pypi_files, requires_dist_text, torch_releases
from wheelfoundry.config import FarmConfig
from wheelfoundry.errors import RequestInvalid
from wheelfoundry.planning.jobs import StackContext
from wheelfoundry.publishing.coverage import Coverage
from wheelfoundry.publishing.index import STATE
from wheelfoundry.toolkits.toolkit_row import FactsOf
from wheelfoundry.watch.subscriptions import PREFIX, Subscription, parse_subscription
from wheelfoundry.watch.watch_facts import PackageRelease, locks_of, package_releases
from wheelfoundry.watch.watcher import Stack, Start, Tick, Upstream, tick

Fetch = Callable[[str, Mapping[str, str]], bytes]
TICK_KEY = "watch/last-tick.json"
RUNS_PREFIX = "watch/runs/"
LOOPBACK = ("http://127.0.0.1:", "http://127.0.0.1/", "http://localhost:", "http://localhost/")  # a local mirror
MAX_BYTES = 256 * 1024 * 1024  # an sdist (flash-attn's is ~8 MB) or an index page (torch's JSON ~0.5 MB)


class FetchFailed(OSError):
    """An upstream URL could not be read (status, network, size)."""


def urllib_fetch(url: str, headers: Mapping[str, str], timeout: float = 30.0) -> bytes:
    """GET over HTTPS (plain HTTP only from this host: a local mirror) with a size limit; a URL an index page
    names is read only so (no file://, no other host over plain HTTP)."""
    if not url.startswith(("https://", *LOOPBACK)):
        raise FetchFailed(f"{url}: only https URLs are read (http only on 127.0.0.1 or localhost)")
    request = urllib.request.Request(url, headers={"User-Agent": "wheelfoundry-watch", **headers})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (schemes checked above)
            body: bytes = response.read(MAX_BYTES + 1)
    except OSError as exc:
        raise FetchFailed(f"{url}: {exc}") from exc
    if len(body) > MAX_BYTES:
        raise FetchFailed(f"{url}: larger than {MAX_BYTES} bytes")
    return body


@dataclass(frozen=True)
class Sources:
    pypi: str = "https://pypi.org/"  # its /simple/<project>/ and /pypi/<project>/json
    pytorch: str = "https://download.pytorch.org/whl/"  # its torch/ page lists every variant

    def simple(self, project: str) -> str:
        return f"{self.pypi.rstrip('/')}/simple/{project}/"


def read_subscriptions(s3: Any, bucket: str) -> tuple[list[Subscription], list[str]]:
    """Every stored subscription; one that no longer parses (a schema change) is named, not followed."""
    subs, problems = [], []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=PREFIX):
        for obj in page.get("Contents", []):
            if not obj["Key"].endswith(".json"):
                continue
            try:
                subs.append(parse_subscription(json.loads(s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())))
            except (ValueError, RequestInvalid) as exc:
                problems.append(f"{obj['Key']}: not followed: {exc}")
    return subs, problems


def _json_object(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    try:
        value = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except (ClientError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def read_coverage(s3: Any, bucket: str, channels: set[str]) -> dict[str, Coverage]:
    return {c: Coverage.of([_json_object(s3, bucket, f"simple/{c}/{STATE}") or {}]) for c in channels}


def read_locks(s3: Any, bucket: str) -> dict[str, bool] | None:
    pointer = _json_object(s3, bucket, "bundles/current.json") or {}
    return locks_of(pointer.get("pins") if isinstance(pointer.get("pins"), dict) else None)


def _metadata(fetch: Fetch, sources: Sources, version: str, wheel: Any) -> tuple[str, str] | None:
    """(METADATA text, where) of a torch release's PyPI Linux wheel: PEP 658 first, else PyPI's JSON API."""
    attempts = [f"{wheel.url}.metadata"] if wheel is not None and wheel.core_metadata else []
    attempts += [f"{sources.pypi.rstrip('/')}/pypi/torch/{version}/json", f"{sources.pypi.rstrip('/')}/pypi/torch/json"]
    for url in attempts:
        try:
            body = fetch(url, {})
        except FetchFailed:
            continue
        if url.endswith(".metadata"):
            return body.decode("utf-8", "replace"), url
        info = json.loads(body).get("info") or {}
        if info.get("version") == version:  # /pypi/torch/json answers for the newest release only
            return requires_dist_text(info), url
    return None


def read_upstream(fetch: Fetch, sources: Sources, subs: list[Subscription], catalog: Catalog) -> Upstream:
    problems: list[str] = []
    torch_page = sources.simple("torch")
    pypi = pypi_files(fetch(torch_page, {"Accept": SIMPLE_JSON}), torch_page)  # no torch list, no tick
    pytorch_page = f"{sources.pytorch.rstrip('/')}/torch/"
    try:
        pytorch = html_files(fetch(pytorch_page, {}).decode("utf-8", "replace"), pytorch_page)
    except FetchFailed as exc:
        pytorch = None
        problems.append(f"PyTorch's index not read ({exc}): a new release's variants are PyPI's only")
    cited = {"pypi": torch_page, "pytorch": pytorch_page}
    metadata: dict[str, str] = {}
    for release in torch_releases(pypi, pytorch, {}, cited):
        if catalog.release(release.minor) is None:  # facts to derive: the PyPI wheel's CUDA
            found = _metadata(fetch, sources, release.version, release.newest_wheel(pypi))
            if found is not None:
                metadata[release.version], cited[f"metadata {release.version}"] = found
    packages: dict[str, tuple[PackageRelease, ...]] = {}
    for sub in subs:
        if "pypi" in sub.source and sub.project not in packages:
            page = sources.simple(sub.project)
            try:
                packages[sub.project] = package_releases(pypi_files(fetch(page, {"Accept": SIMPLE_JSON}), page))
            except (FetchFailed, ValueError) as exc:
                problems.append(f"{sub.package}: PyPI page not read ({exc})")
    releases = torch_releases(pypi, pytorch, metadata, cited)
    return Upstream(tuple(releases), packages, pytorch is not None, tuple(problems), metadata)


def copy_sdist(s3: Any, bucket: str, fetch: Fetch, start: Start) -> None:
    """A pypi source's sdist into the bucket where the request names it, once, its sha256 checked."""
    sdist = start.copy
    if sdist is None:
        return
    key = start.request["source"]["s3"].split("/", 3)[3]
    try:
        s3.head_object(Bucket=bucket, Key=key)
        return
    except ClientError:
        pass
    body = fetch(sdist.url, {})
    digest = hashlib.sha256(body).hexdigest()
    if sdist.sha256 and digest != sdist.sha256:
        raise FetchFailed(f"{sdist.url}: sha256 {digest}, PyPI lists {sdist.sha256}")
    s3.put_object(Bucket=bucket, Key=key, Body=body, Metadata={"sha256": digest, "source": sdist.url})


def execution_status(sfn: Any, state_machine_arn: str, name: str) -> tuple[str | None, str]:
    """(status or None where no execution has that name, its ARN)."""
    arn = state_machine_arn.replace(":stateMachine:", ":execution:") + f":{name}"
    try:
        return str(sfn.describe_execution(executionArn=arn)["status"]), arn
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ExecutionDoesNotExist":
            raise
    return None, arn


def start_run(sfn: Any, state_machine_arn: str, start: Start) -> tuple[str, str]:
    """(status, execution ARN): "started" now, or the status of the execution of that name (its tick was earlier)."""
    status, arn = execution_status(sfn, state_machine_arn, start.name)
    if status is not None:
        return status, arn
    try:
        started = sfn.start_execution(
            stateMachineArn=state_machine_arn, name=start.name, input=json.dumps(start.request)
        )
    except ClientError as exc:  # another tick started it between the two calls
        if exc.response.get("Error", {}).get("Code") != "ExecutionAlreadyExists":
            raise
        return "RUNNING", arn
    return "started", str(started["executionArn"])


def retest_ended(sfn: Any, state_machine_arn: str, name: str) -> str | None:
    """The status of the retest execution of that name once it ended (its cells still missing: it did not serve
    them); None while it runs or before it started."""
    status = execution_status(sfn, state_machine_arn, name)[0]
    return None if status in (None, "RUNNING", "PENDING_REDRIVE") else status


def run_record(start: Start, now: datetime, locked: list[dict[str, Any]] | None = None) -> bytes:
    """What Report needs to tell the subscription's maintainer about the run (watch/runs/<execution>.json);
    ``locked``: the toolkit locks this tick wrote that the run's cells use (the notification names them)."""
    used = {(c[1], c[3]) for c in start.cells}
    body = {
        "toolkits": [t for t in locked or [] if (t["cuda"], t["platform"]) in used],
        "subscription": start.subscription,
        "reason": start.reason,
        "cells": [dict(zip(("torch", "cuda", "python", "platform"), c, strict=True)) for c in start.cells],
        "request": start.request,
        "planned": {k: start.plan.get(k) for k in ("estimated_wall_hours", "estimated_usd", "jobs")},
        "started_at": now.isoformat(),
    }
    return json.dumps(body, indent=2).encode()


def write_derived(s3: Any, bucket: str, found: list[derived.DerivedRelease]) -> None:
    """Keep ``watch/derived.json`` up to date (merged by release, the newest facts win); unchanged: no write."""
    known = {r.torch: r for r in derived.read(s3, bucket)}
    merged = {**known, **{r.torch: r for r in found}}
    if merged != known:
        s3.put_object(Bucket=bucket, Key=derived.DERIVED_KEY, Body=derived.body(merged.values()))


@dataclass(frozen=True)
class WatchSettings:
    bucket: str
    state_machine_arn: str
    config: FarmConfig  # with the stack's guardrails: the watcher plans as Validate will
    context: StackContext
    sources: Sources = Sources()
    max_starts: int = 4  # runs one tick may start; the rest wait for the next tick (and are named)
    dry_run: bool = False
    toolkit_approval: str = "auto"  # ToolkitApproval: "manual" records a new lock unapproved (its cells wait)
    facts: FactsOf | None = None  # a new toolkit's row facts; None: read upstream (toolkit_facts), else assumed


def run_tick(s3: Any, sfn: Any, fetch: Fetch, settings: WatchSettings, now: datetime) -> dict[str, Any]:
    """One tick: what it read, started and could not do, also written to ``watch/last-tick.json``."""
    subs, problems = read_subscriptions(s3, settings.bucket)
    record: dict[str, Any] = {"at": now.isoformat(), "dry_run": settings.dry_run, "problems": problems}
    record.update(subscriptions={}, runs=[])
    catalog = load_catalog()
    try:
        upstream = read_upstream(fetch, settings.sources, subs, catalog) if subs else None  # none: nothing to read
    except (FetchFailed, ValueError) as exc:  # PyPI down for a while: the next tick reads it again
        record["problems"].append(f"PyPI's torch page not read, nothing compared: {exc}")
        upstream = None
    if upstream is not None:
        coverage = read_coverage(s3, settings.bucket, {s.channel for s in subs})
        base = Stack(settings.bucket, catalog, settings.config, read_locks(s3, settings.bucket), settings.context)
        # The toolkits the cells need and nothing locks: locked and recorded first, so this tick plans them.
        stack, written, problems = toolkits.learn(s3, fetch, settings, subs, upstream, base, now.isoformat())
        record["problems"] += problems
        planned = tick(subs, upstream, coverage, stack)
        if planned.derived and not settings.dry_run:  # before any run: its Validate reads them
            write_derived(s3, settings.bucket, planned.derived)
        record.update(tick_record(upstream, planned))
        record["toolkits"] = locked = [toolkits.described(e, settings.dry_run) for e in written]
        runs = enumerate(planned.starts)
        record["runs"] = [_act(s3, sfn, fetch, settings, start, n, now, locked) for n, start in runs]
    if not settings.dry_run:
        s3.put_object(Bucket=settings.bucket, Key=TICK_KEY, Body=json.dumps(record, indent=2).encode())
    return record


def tick_record(upstream: Upstream, planned: Tick) -> dict[str, Any]:
    """What a tick read and decided, as ``watch/last-tick.json`` keeps it (runs: as planned, not yet acted on)."""
    subscriptions = {
        o.subscription: {f.name: getattr(o, f.name) for f in fields(o) if f.name != "planned"} for o in planned.outcomes
    }
    torch = {"releases": [r.version for r in upstream.torch], "pytorch_index_read": upstream.pytorch_index_read}
    return {"torch": torch, "derived": [d.to_json() for d in planned.derived], "subscriptions": subscriptions}


def planned_run(start: Start) -> dict[str, Any]:
    return {
        "subscription": start.subscription,
        "name": start.name,
        "reason": start.reason,
        "cells": len(start.cells),
        "wall_hours": start.plan.get("estimated_wall_hours"),
        "usd": start.plan.get("estimated_usd"),
        "jobs": start.plan.get("job_estimates"),
        "tests": len(start.plan.get("tests") or []),
        "request": start.request,
    }


def _act(
    s3: Any,
    sfn: Any,
    fetch: Fetch,
    settings: WatchSettings,
    start: Start,
    n: int,
    now: datetime,
    locked: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    run = planned_run(start)
    if n >= settings.max_starts:
        return {**run, "status": f"deferred: a tick starts at most {settings.max_starts} run(s) (WatchMaxRunsPerTick)"}
    if settings.dry_run:
        return {**run, "status": "would start"}
    if start.fallback is not None:  # a retest: once it ended and the cells still lack a wheel, their build
        ended = retest_ended(sfn, settings.state_machine_arn, start.name)
        if ended:
            reason = f"{start.fallback.reason}: the retest {start.name} ended ({ended}) without serving them; building"
            return _act(s3, sfn, fetch, settings, replace(start.fallback, reason=reason), n, now, locked)
    try:
        copy_sdist(s3, settings.bucket, fetch, start)
    except FetchFailed as exc:
        return {**run, "status": f"not started: the sdist could not be copied ({exc})"}
    s3.put_object(Bucket=settings.bucket, Key=f"{RUNS_PREFIX}{start.name}.json", Body=run_record(start, now, locked))
    status, arn = start_run(sfn, settings.state_machine_arn, start)
    return {**run, "status": status if status == "started" else f"already started ({status})", "execution": arn}
