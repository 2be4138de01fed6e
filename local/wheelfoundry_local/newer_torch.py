"""``local run`` / ``local demo`` of an extension request naming a torch release newer than the catalog.

The embedded stack is deployed fresh for each run, so its watcher has never ticked: Validate would find no
``watch/derived.json`` (and, for a CUDA the catalog lacks, no ``toolkits/index.json``) and refuse the request
with "torch X.Y is not in the compatibility catalog". Before the run starts, this plays the watcher's part for
the request's newer torch: the facts and toolkit locks derived from upstream exactly as the watcher derives
them (wheelfoundry_cli.newer_torch, the code `wheelfoundry plan` uses), written where the watcher writes them
(aws.watch.write_derived, aws.toolkits.put_lock / update_record), so Validate and the builds read them as on AWS.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wheelfoundry_cli.newer_torch import catalog_for

from wheelfoundry.aws import toolkits
from wheelfoundry.aws.watch import Fetch, Sources, urllib_fetch, write_derived
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.errors import RequestInvalid
from wheelfoundry.toolkits import stack_toolkits

UPSTREAM = Sources()  # PyPI and PyTorch's index, as the stack's watcher reads them by default


def seed(
    s3: Any,
    bucket: str,
    request: Any,
    out: Callable[[str], None],
    fetch: Fetch = urllib_fetch,
    sources: Sources = UPSTREAM,
) -> bool:
    """Write the newer torch's facts (and any lock its CUDA cells need) into the stack; False: nothing to do.
    ValueError naming the torch version, what was tried and the fix where upstream cannot be read."""
    try:
        found = catalog_for(request, load_catalog(), load_config(), None, fetch, sources)
    except RequestInvalid as exc:
        raise ValueError(str(exc.issues[0])) from exc
    if found is None:
        return False
    for entry, body in found.locks:
        toolkits.put_lock(s3, bucket, entry.key, entry.sha256, body)
        out(f"toolkit lock for the embedded stack: CUDA {entry.cuda} {entry.platform} {entry.key}")
    if found.locks:  # after the locks: the record never names a key not yet there
        entries = [entry for entry, _ in found.locks]
        _, written = toolkits.update_record(s3, bucket, lambda current: stack_toolkits.added(current, entries))
        if not written:
            raise ValueError(f"{stack_toolkits.INDEX_KEY} changed while it was written: run again")
    write_derived(s3, bucket, found.derived)
    out(f"torch {', '.join(d.torch for d in found.derived)} is newer than the catalog: facts from {found.where}")
    return True
