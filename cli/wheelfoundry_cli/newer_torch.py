"""`wheelfoundry plan` of an extension request naming a torch release newer than the catalog (issue 64 item 3).

Validate plans such a request from the stack's watcher record (``watch/derived.json``, and
``toolkits/index.json`` for a CUDA the catalog lacks); the user's machine plans it from the same facts:

- ``--stack NAME`` given: that stack's two records, read with the user's credentials (boto3), as Validate reads
  them, so the plan is the one the stack would run;
- else upstream: PyPI's torch page (and PyTorch's index where reachable) read and derived exactly as the
  watcher's tick derives them (wheelfoundry.aws.watch.read_upstream, wheelfoundry.watch.watcher.tick), and each CUDA
  13+ toolkit the request names that nothing locks resolved as the watcher would lock it
  (aws.toolkits.resolve_locks; written nowhere).

Where neither can be read the request is refused naming the torch version, what was tried and the fix.
Only extension requests are helped: a framework build needs the catalog's library pairs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from packaging.version import Version

from wheelfoundry.catalog import derived
from wheelfoundry.catalog.catalog import Catalog, minor_of
from wheelfoundry.config import FarmConfig
from wheelfoundry.errors import Issue, RequestInvalid
from wheelfoundry.toolkits import stack_toolkits
from wheelfoundry.toolkits.stack_toolkits import StackToolkit


@dataclass(frozen=True)
class Found:
    """What a newer torch is planned with, and (from upstream) what the stack's watcher would write for it."""

    catalog: Catalog  # the catalog plus the newer release's facts and any new toolkit's row
    where: str  # where the facts came from, for the person reading the plan
    record: dict[str, StackToolkit]  # the stack's toolkit locks (toolkits/index.json) the plan may use
    derived: list[derived.DerivedRelease] = field(default_factory=list)  # from upstream: watch/derived.json's
    locks: list[tuple[StackToolkit, bytes]] = field(default_factory=list)  # from upstream: locks and their bytes


def newer_minors(raw: Any, catalog: Catalog) -> list[str]:
    """The torch minors an extension request names that the catalog lacks and that are newer than its rows
    (an older gap is the catalog's to fill: those are refused by the planner as before)."""
    if not derived.wanted(raw, catalog):
        return []
    newest = Version(catalog.newest_release().torch)
    minors = {m for t in raw["torch"] if isinstance(t, str) and (m := minor_of(t)) and catalog.release(m) is None}
    return sorted((m for m in minors if Version(m) > newest), key=Version)


def from_stack(farm: Any, catalog: Catalog, raw: Any) -> Found:
    """The catalog as the stack's Validate would plan ``raw`` with: its derived releases, its approved locks."""
    from wheelfoundry.aws.toolkits import read_record

    s3 = farm.client("s3")
    found = derived.read(s3, farm.bucket)
    catalog = derived.with_derived(catalog, found)
    notes = f"stack {farm.stack}'s {derived.DERIVED_KEY} ({len(found)} release(s))"
    record: dict[str, StackToolkit] = {}
    if stack_toolkits.wanted(raw, catalog):
        record, problems = read_record(s3, farm.bucket)
        catalog = stack_toolkits.with_stack_toolkits(catalog, record)
        notes += f" and {stack_toolkits.INDEX_KEY} ({len(record)} lock(s)){''.join(f'; {p}' for p in problems)}"
    return Found(catalog, notes, record)


def from_upstream(
    raw: Mapping[str, Any], catalog: Catalog, config: FarmConfig, minors: list[str], fetch: Any, sources: Any
) -> Found:
    """The catalog plus the facts the watcher's tick would derive from upstream for ``minors``, and the toolkit
    rows of the locks it would write for the request's CUDA versions (FetchFailed where PyPI cannot be read)."""
    from wheelfoundry.aws import toolkits
    from wheelfoundry.aws.watch import WatchSettings, read_upstream
    from wheelfoundry.planning.jobs import StackContext
    from wheelfoundry.watch.subscriptions import parse_subscription
    from wheelfoundry.watch.watcher import Stack, tick

    cudas = [c for c in raw.get("cuda") or [] if isinstance(c, str) and c != "cpu"]
    platforms = raw.get("platforms") or ["x86_64"]
    # One subscription per new minor stands for the request: the tick derives its facts and names its toolkits.
    subs = [
        parse_subscription(
            {
                "package": str(raw.get("name") or "request"),
                "source": {"pypi": "latest"},
                "torch": f"=={m}.*",
                "cuda": cudas or "all",
                "platforms": platforms,
            }
        )
        for m in minors
    ]
    upstream = read_upstream(fetch, sources, [], catalog)
    base = Stack("your-stack-bucket", catalog, config, None)
    settings = WatchSettings("your-stack-bucket", "", config, StackContext(), sources, dry_run=True)
    now = datetime.now(UTC).isoformat()
    stack, resolved, record = toolkits.resolve_locks(fetch, settings, subs if cudas else [], upstream, base, {}, now)
    planned = tick(subs, upstream, {}, stack if cudas else base)
    found = [d for d in planned.derived if d.torch in minors]
    catalog = derived.with_derived(stack.catalog, found)
    where = ", ".join(sorted({url for d in found for url in d.sources.values()})) or sources.pypi
    locks = "".join(f"; CUDA {e.cuda} {e.platform} as the watcher would lock it ({e.key})" for e, _ in resolved)
    return Found(catalog, f"upstream ({where}){locks}", record, found, resolved)


def catalog_for(raw: Any, catalog: Catalog, config: FarmConfig, stack: Any, fetch: Any, sources: Any) -> Found | None:
    """What to plan ``raw`` with where it names a torch newer than the catalog (None: the catalog has them).
    ``stack``: a wheelfoundry_user.farm.Farm (its records), or None (upstream, read with ``fetch``)."""
    minors = newer_minors(raw, catalog)
    if not minors:
        return None
    tried = []
    if stack is not None:
        from botocore.exceptions import BotoCoreError, ClientError

        from wheelfoundry_user import UserError

        try:
            found = from_stack(stack, catalog, raw)
        except (UserError, BotoCoreError, ClientError, OSError, ValueError, KeyError) as exc:
            tried.append(f"stack {getattr(stack, 'stack', '?')}: {exc}")
        else:
            if all(found.catalog.release(m) is not None for m in minors):
                return found
            tried.append(
                f"{found.where}: no facts of torch {', '.join(minors)} (its watcher follows no such release yet)"
            )
    if stack is None:
        from wheelfoundry.aws.watch import FetchFailed

        try:
            found = from_upstream(raw, catalog, config, minors, fetch, sources)
        except (FetchFailed, ValueError) as exc:
            tried.append(f"upstream {sources.pypi}: {exc}")
        else:
            if all(found.catalog.release(m) is not None for m in minors):
                return found
            tried.append(f"{found.where}: PyPI lists no final release of torch {', '.join(minors)}")
    known = tuple(r.torch for r in catalog.releases)
    fix = (
        "name a stack whose watcher follows it (--stack NAME), or let PyPI be read (--pypi-url a mirror), "
        "or name a release the catalog has"
    )
    if stack is not None:  # the plan is to be the stack's: upstream is not mixed in unasked
        fix = "let its watcher tick first (it derives them), or plan without --stack (from PyPI), "
        fix += "or name a release the catalog has"
    message = (
        f"torch {', '.join(minors)} is not in the compatibility catalog and its facts could not be read "
        f"(tried: {'; '.join(tried)}); {fix}"
    )
    raise RequestInvalid([Issue("torch", message, list(raw.get("torch") or []), known)])
