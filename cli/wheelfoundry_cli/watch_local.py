"""One watcher tick on this machine: against recorded upstream responses or the live indexes, and how a tick
reads to a person (`wheelfoundry local watch`, `wheelfoundry subscriptions list`, `status`).

A recording is a folder laid out by URL: ``<host>/<path>``, a page URL (ending in ``/``) stored as
``index.json`` (PEP 691 JSON, asked for with its Accept header) or ``index.html``; ``--record DIR`` writes
such a folder from the live indexes, so a tick can be replayed (tests/fixtures/watch/ is one).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from wheelfoundry.aws import toolkits
from wheelfoundry.aws.watch import (
    Fetch,
    FetchFailed,
    Sources,
    WatchSettings,
    planned_run,
    read_upstream,
    tick_record,
    urllib_fetch,
)
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.catalog.upstream_index import SIMPLE_JSON
from wheelfoundry.config import FarmConfig
from wheelfoundry.planning.jobs import StackContext
from wheelfoundry.publishing.coverage import Coverage
from wheelfoundry.toolkits.toolkit_row import FactsOf
from wheelfoundry.watch.subscriptions import Subscription
from wheelfoundry.watch.watcher import Stack, tick

DRY_RUN_BUCKET = "your-stack-bucket"  # where a dry run's pypi sources would be copied


def recorded_path(root: Path, url: str, headers: Mapping[str, str]) -> Path:
    parts = urlsplit(url)
    path = parts.path.lstrip("/")
    if not path or path.endswith("/"):
        path += "index.json" if headers.get("Accept") == SIMPLE_JSON else "index.html"
    resolved = (root / parts.netloc / path).resolve()
    if root.resolve() not in resolved.parents:
        raise FetchFailed(f"{url}: outside the recording {root}")
    return resolved


def recorded(root: Path, *more: Path) -> Fetch:
    """Upstream as recorded under ``root`` (then each of ``more``, the first that holds a URL answers: torch's
    pages in one recording, NVIDIA's in another); what none holds reads as unreachable."""

    def fetch(url: str, headers: Mapping[str, str]) -> bytes:
        paths = [recorded_path(r, url, headers) for r in (root, *more)]
        for path in paths:
            try:
                return path.read_bytes()
            except OSError:
                continue
        raise FetchFailed(f"{url}: not in the recording ({paths[0].relative_to(root.resolve())})")

    return fetch


def recording(root: Path, fetch: Fetch = urllib_fetch) -> Fetch:
    """The live indexes, each response also written under ``root`` (sdists are not recorded)."""

    def fetch_and_keep(url: str, headers: Mapping[str, str]) -> bytes:
        body = fetch(url, headers)
        if not url.endswith((".tar.gz", ".zip", ".whl")):
            path = recorded_path(root, url, headers)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
        return body

    return fetch_and_keep


def offline_tick(
    subs: list[Subscription],
    fetch: Fetch,
    sources: Sources,
    coverage: Mapping[str, Coverage],
    locks: Mapping[str, bool] | None,
    config: FarmConfig,
    now: datetime,
    facts: FactsOf | None = None,
) -> dict[str, Any]:
    """A dry-run tick without a stack: the channels' coverage given, the locks this checkout has, and the lock
    the watcher would write for each CUDA 13+ toolkit the cells need that this checkout lacks: resolved from
    ``fetch``'s PyPI as the watcher's tick resolves it (aws.toolkits.resolve_locks), printed, written nowhere,
    and planned with, so the plan is the one the stack's first tick would start. ``facts``: a new toolkit's
    row facts (None: read from the torch wheel upstream, as the watcher does)."""
    catalog = load_catalog()
    upstream = read_upstream(fetch, sources, subs, catalog)
    base = Stack(DRY_RUN_BUCKET, catalog, config, locks)
    settings = WatchSettings(DRY_RUN_BUCKET, "", config, StackContext(), sources, dry_run=True, facts=facts)
    stack, resolved, _ = toolkits.resolve_locks(fetch, settings, subs, upstream, base, {}, now.isoformat())
    planned = tick(subs, upstream, coverage, stack)
    runs = [{**planned_run(s), "status": "would start"} for s in planned.starts]
    written = [toolkits.described(entry, True, body) for entry, body in resolved]
    record = {"at": now.isoformat(), "dry_run": True, "problems": [], **tick_record(upstream, planned)}
    return {**record, "toolkits": written, "runs": runs}


def _cells_line(request: Mapping[str, Any]) -> str:
    axes = [" ".join(request.get(k) or []) for k in ("torch", "cuda", "python", "platforms")]
    text = f"torch {axes[0]} x CUDA/cpu {axes[1]} x Python {axes[2]} x {axes[3]}"
    left_out = request.get("exclude") or []
    return text + (f", less {len(left_out)} exclude entr{'y' if len(left_out) == 1 else 'ies'}" if left_out else "")


def render_tick(record: Mapping[str, Any], verbose: bool = False) -> str:
    torch = record.get("torch") or {}
    lines = [f"watcher tick {record.get('at', '?')}" + (" (dry run: nothing started)" if record.get("dry_run") else "")]
    if torch:
        index = "read" if torch.get("pytorch_index_read") else "NOT read"
        lines.append(f"  torch on PyPI: {' '.join(torch.get('releases', [])[-6:])}; PyTorch's index {index}")
    for derived in record.get("derived") or []:
        cuda = " ".join(derived.get("cuda") or []) or "none known"
        lines.append(f"  torch {derived['torch']} is not in the catalog: facts from its wheels, CUDA {cuda}")
    for lock in record.get("toolkits") or []:
        wheels = f", {lock['wheels']} wheel(s)" if "wheels" in lock else ""
        waits = "" if lock.get("approved", True) else ", awaiting approval"
        lines.append(
            f"  toolkit lock {lock.get('status', 'written')}: CUDA {lock['cuda']} {lock['platform']} "
            f"(release {lock['release']}{wheels}{waits}) {lock['key']} sha256 {lock['sha256']}"
        )
    lines += [f"  problem: {p}" for p in record.get("problems") or []]
    runs_by_sub: dict[str, list[Mapping[str, Any]]] = {}
    for run in record.get("runs") or []:
        runs_by_sub.setdefault(run["subscription"], []).append(run)
    for name, sub in sorted((record.get("subscriptions") or {}).items()):
        version = sub.get("version") or "from its source"
        lines.append(f"subscription {name}: {sub.get('package')} {version}")
        lines.append(
            f"  torch in range: {' '.join(sub.get('releases') or []) or 'none'} "
            f"({len(sub.get('ignored') or [])} outside ignored); cells published {sub.get('covered', 0)}, "
            f"missing {sub.get('missing', 0)}"
        )
        for run in runs_by_sub.get(name, []):
            lines.append(f"  {run['status']}: {run['name']} ({run['reason']})")
            request = run.get("request") or {}
            lines.append(
                f"    {run['cells']} cell(s): {_cells_line(request)}" if request else f"    {run['cells']} cell(s)"
            )
            jobs = run.get("jobs") or {}
            tests = f" + {run['tests']} test job(s)" if run.get("tests") else ""
            lines.append(
                f"    {len(jobs)} build job(s){tests}: planned wall time {run.get('wall_hours')} h, "
                f"estimated {run.get('usd')} USD"
            )
            if verbose:
                lines += [f"      {job}: {e['hours']} h, {e['usd']} USD" for job, e in jobs.items()]
        if not runs_by_sub.get(name) and not sub.get("missing"):
            lines.append("  up to date: the channel has every cell")
        shared = set(record.get("problems") or [])
        lines += [f"  problem: {p}" for p in sub.get("problems") or [] if p not in shared]
    return "\n".join(lines)
