"""The stack's toolkits in its bucket (wheelfoundry.toolkits.stack_toolkits): read the record; and the watcher's part,
lock each CUDA toolkit a followed release needs that the deployment has no lock for.

A lock is resolved as tools/lock_cuda.py resolves it (wheelfoundry.toolkits.toolkit_lock: NVIDIA's ``cuda-toolkit``
metapackage for the compiler, each ``nvidia-*`` line the torch wheel's METADATA pins, each file's sha256 from
the index's JSON), rendered by the same code (wheelfoundry.toolkits.toolkit_lock_file), put under ``toolkits/`` by its
digest and recorded in ``toolkits/index.json`` before any run is planned, so the tick that locks it also
plans its cells. With ``ToolkitApproval=manual`` the lock is recorded unapproved: its cells wait, named.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from botocore.exceptions import ClientError

from wheelfoundry.catalog.catalog import Catalog, minor_of
from wheelfoundry.conditional import CONFLICT, jittered
from wheelfoundry.toolkits import stack_toolkits, toolkit_facts, toolkit_lock, toolkit_lock_file
from wheelfoundry.toolkits.stack_toolkits import INDEX_KEY, StackToolkit
from wheelfoundry.toolkits.toolkit_row import FactsOf, upstream_or_assumed
from wheelfoundry.watch.subscriptions import Subscription
from wheelfoundry.watch.watcher import Stack, Upstream, toolkits_needed

WRITER = "the WheelFoundry watcher (wheelfoundry.aws.toolkits, as tools/lock_cuda.py wheels)"
Get = toolkit_lock.Get
NOT_READ = f"{INDEX_KEY} not read"  # the record exists but could not be read (not: it was never written)
ATTEMPTS = 3


def read_record(s3: Any, bucket: str) -> tuple[dict[str, StackToolkit], list[str]]:
    """The record's valid entries and what was ignored; none where it was never written."""
    record, problems, _ = read_tagged(s3, bucket)
    return record, problems


def read_tagged(s3: Any, bucket: str) -> tuple[dict[str, StackToolkit], list[str], str | None]:
    """read_record, and the ETag a conditional write of it names (None: never written)."""
    try:
        obj = s3.get_object(Bucket=bucket, Key=INDEX_KEY)
        body = obj["Body"].read()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return {}, [], None
        return {}, [f"{NOT_READ} ({exc}): the stack's toolkits are not used this time"], None
    record, problems = stack_toolkits.parse(body)
    etag = obj.get("ETag")  # S3 always answers one; a reader that only reads may not need it
    return record, problems, str(etag) if etag else None


def put_lock(s3: Any, bucket: str, key: str, sha256: str, body: bytes) -> None:
    """Put a lock at its content-addressed key, never over one (an existing key already holds these bytes)."""
    try:
        s3.head_object(Bucket=bucket, Key=key)
        return
    except ClientError:
        pass
    s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/toml", Metadata={"sha256": sha256})


def write_record(s3: Any, bucket: str, record: Mapping[str, StackToolkit], etag: str | None) -> bool:
    """Write the record over the one read as ``etag`` (None: over none); False where another writer (a tick, an
    approval) wrote it since, so nothing of theirs is lost: the caller reads it again."""
    condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
    try:
        s3.put_object(
            Bucket=bucket, Key=INDEX_KEY, Body=stack_toolkits.body(record), ContentType="application/json", **condition
        )
    except ClientError as exc:
        # NoSuchKey: the record read was deleted since (If-Match names an object that is gone): read it again
        if exc.response.get("Error", {}).get("Code") in (*CONFLICT, "NoSuchKey"):
            return False
        raise
    return True


def update_record(
    s3: Any, bucket: str, change: Callable[[dict[str, StackToolkit]], Mapping[str, StackToolkit] | None]
) -> tuple[dict[str, StackToolkit], bool]:
    """Read, change and conditionally write the record, again on a conflict (ATTEMPTS in all): (the record as
    written or last read, whether it was written). ``change`` returns None where there is nothing to write."""
    record: dict[str, StackToolkit] = {}
    for attempt in range(ATTEMPTS):
        if attempt:  # another writer is at it: let it finish
            jittered(attempt)
        record, problems, etag = read_tagged(s3, bucket)
        if any(p.startswith(NOT_READ) for p in problems):  # never written over unread entries and approvals
            return record, False
        changed = change(record)
        if changed is None:
            return record, True
        if write_record(s3, bucket, changed, etag):
            return dict(changed), True
    return record, False


def with_record(
    stack: Stack, bundle: Mapping[str, bool] | None, record: Mapping[str, StackToolkit], notes: Mapping[str, str]
) -> Stack:
    """The stack as a tick plans with it: the record's approved rows and locks, and why others wait."""
    return dataclasses.replace(
        stack,
        catalog=stack_toolkits.with_stack_toolkits(stack.catalog, record),
        locks=stack_toolkits.locks_view(bundle, record),
        notes={**stack_toolkits.waiting(record), **notes},
    )


def torch_lines(
    upstream: Upstream, cuda: str, versions: Sequence[str], platform: str = "x86_64", catalog: Catalog | None = None
) -> tuple[list[str], str, str]:
    """(requirement lines, the torch version whose wheel the facts are read from, where): the lines the cells will
    install from the lock (their CUDA_REQUIREMENTS). Per release that needs the toolkit, its PyPI wheel's METADATA
    where read, else its catalog pins; and a CUDA the catalog has (on a deployment whose bundle lacks its lock) adds
    its row's pins, which extension cells install. None at all: the lock takes the metapackage's library extras, and
    that is said."""
    lines: list[str] = []
    wheres, read = [], None
    for version in versions:
        text = upstream.metadata.get(version)
        found = toolkit_lock.torch_lines(text, cuda) if text else []
        if found:
            read = read or version
            wheres.append(f"torch {version}'s PyPI wheel METADATA (Requires-Dist)")
        elif (
            catalog is not None
            and cuda in catalog.cuda
            and (minor := minor_of(version))
            and (release := catalog.release(minor))
        ):
            found = list(catalog.toolkit_for(release, cuda, platform).requirements)
            wheres += [f"torch {version}'s catalog pins (what its cells install)"] if found else []
        lines += [line for line in found if line not in lines]
    if catalog is not None and cuda in catalog.cuda and (row := catalog.cuda[cuda].requirements):
        lines += [line for line in row if line not in lines]  # extension cells install the row's own lines
        wheres.append(f"the catalog's CUDA {cuda} row's pins (what extension cells install)")
    if not lines:
        return [], versions[0], f"no torch wheel read is a CUDA {cuda} build: cuda-toolkit's library extras"
    return lines, read or versions[0], "; ".join(wheres)


def lock_one(
    index: toolkit_lock.SimpleIndex,
    upstream: Upstream,
    cuda: str,
    platform: str,
    versions: Sequence[str],
    catalog: Catalog | None = None,
) -> tuple[dict[str, Any], bytes, str, str]:
    """(the lock, its bytes, why it was written, the torch version whose wheel it follows) for (cuda, platform);
    ToolkitLockError where it cannot be."""
    lines, version, where = torch_lines(upstream, cuda, versions, platform, catalog)
    found = toolkit_lock.resolve(index, cuda, platform, lines)
    if not any(w.part == "compiler" for w in found.wheels):
        raise toolkit_lock.ToolkitLockError(f"CUDA {cuda} {platform}: the resolution holds no compiler wheels")
    lock = toolkit_lock_file.document(found)
    body = toolkit_lock_file.render(lock, WRITER).encode()
    reason = f"torch {', '.join(versions)} need CUDA {cuda} on {platform}; release {found.release}; lines: {where}"
    return lock, body, reason, version


def resolve_locks(
    get: Get,
    settings: Any,  # aws.watch.WatchSettings: sources, toolkit_approval, facts
    subscriptions: Sequence[Subscription],
    upstream: Upstream,
    base: Stack,
    record: Mapping[str, StackToolkit],
    now: str,
) -> tuple[Stack, list[tuple[StackToolkit, bytes]], dict[str, StackToolkit]]:
    """Resolve (never write) a lock for each toolkit the subscriptions' cells need that neither the bundle nor
    ``record`` has: (the stack to plan with, each new entry with its bytes, the record with them). The watcher's
    tick writes what this returns; a dry run (`wheelfoundry local watch --dry-run`) only prints it."""
    stack = with_record(base, base.locks, record, {})
    needs = {k: v for k, v in toolkits_needed(subscriptions, upstream, stack).items() if f"{k[0]}-{k[1]}" not in record}
    if not needs:
        return stack, [], dict(record)
    index = toolkit_lock.SimpleIndex(get, settings.sources.pypi.rstrip("/") + "/simple/{}/")
    facts: FactsOf = settings.facts or upstream_or_assumed(
        toolkit_facts.reader(get, base.catalog.cuda, index), base.catalog
    )
    resolved, notes = [], {}
    for (cuda, platform), versions in sorted(needs.items()):
        try:
            lock, body, reason, version = lock_one(index, upstream, cuda, platform, versions, base.catalog)
            found = facts(cuda, platform, version)  # the torch wheel built with it: where its facts are read
        except Exception as exc:  # a bad zip, an index's odd answer, a throttled bucket: named, the tick goes on
            fix = f"run tools/lock_cuda.py wheels {cuda} --platform {platform}, then redeploy"
            notes[f"{cuda}-{platform}"] = (
                f"CUDA {cuda}: no lock for {platform}; the watcher could not write one ({exc}); {fix}"
            )
            continue
        entry = stack_toolkits.entry(lock, body, found, settings.toolkit_approval != "manual", now, reason)
        resolved.append((entry, body))
    merged = stack_toolkits.merge(record, [e for e, _ in resolved])
    return with_record(base, base.locks, merged, notes), resolved, merged


def learn(
    s3: Any,
    get: Get,
    settings: Any,  # aws.watch.WatchSettings: bucket, sources, toolkit_approval, facts, dry_run
    subscriptions: Sequence[Subscription],
    upstream: Upstream,
    base: Stack,
    now: str,
) -> tuple[Stack, list[StackToolkit], list[str]]:
    """Lock what the subscriptions' cells need (written unless a dry run); (the stack to plan with, the locks
    written, problems). A toolkit that cannot be locked is named on its cells; the rest of the tick goes on."""
    record, problems = read_record(s3, settings.bucket)
    if any(p.startswith(NOT_READ) for p in problems):  # never written over unread (entries, approvals): next tick
        return with_record(base, base.locks, record, {}), [], problems
    stack, resolved, merged = resolve_locks(get, settings, subscriptions, upstream, base, record, now)
    if resolved and not settings.dry_run:
        for entry, body in resolved:
            put_lock(s3, settings.bucket, entry.key, entry.sha256, body)
        # After the locks (the record never names a key not yet there), over the record as it is now: an approval
        # or another tick may have written it since it was read, and theirs stays.
        new = [e for e, _ in resolved]
        latest, written = update_record(s3, settings.bucket, lambda current: stack_toolkits.added(current, new))
        failed = {k: v for k, v in stack.notes.items() if k not in stack_toolkits.waiting(merged)}  # not locked
        if not written:
            why = f"{INDEX_KEY} changed under this tick {ATTEMPTS} times, or could not be read again"
            problems.append(f"{why}: its new locks are recorded next tick")
            waits = {e.name: f"CUDA {e.cuda}: locked as {e.key}, but {why}: next tick" for e in new}
            return with_record(base, base.locks, record, {**failed, **waits}), [], problems
        stack = with_record(base, base.locks, latest, failed)
    return stack, [e for e, _ in resolved], problems


def described(entry: StackToolkit, dry_run: bool, body: bytes | None = None) -> dict[str, Any]:
    """A written lock as the tick record, the run record and the notification name it (``body``: its bytes, to
    count the files it pins)."""
    wheels = {"wheels": len(tomllib.loads(body.decode()).get("wheel", []))} if body is not None else {}
    return {
        "cuda": entry.cuda,
        "platform": entry.platform,
        "release": entry.row.toolkit,
        "key": entry.key,
        "sha256": entry.sha256,
        "approved": entry.approved,
        "status": "would write" if dry_run else "written",
        "sources": dict(entry.sources),
        **wheels,
    }
