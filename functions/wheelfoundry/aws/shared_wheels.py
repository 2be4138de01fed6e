"""One wheel staged for several test jobs: an abi3 or py3-none wheel serves every Python, and each Python's test
job tests it in its own cells (aws.merging). It is published only once every one of them passed, with every
variant they tested: each job's Collect leaves a mark (``runs/<run>/passed/<wheel>/<job>``), and the one that
finds every mark there publishes. One that failed leaves none, so the wheel is published for no Python, never for
some while it failed for another. Two that finish at once both publish: the same bytes and the same variants.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from packaging.version import InvalidVersion, Version


def sharing(merged: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """wheel file name -> {"jobs": the test jobs it was staged for, "variants": all their variants} (merge.json's
    wheels), for names staged for more than one job."""
    found: dict[str, dict[str, Any]] = {}
    for w in merged:
        entry = found.setdefault(str(w.get("filename")), {"jobs": set(), "variants": set()})
        entry["jobs"].add(str(w.get("test_job")))
        entry["variants"] |= {str(v) for v in w.get("variants") or []}
    return {
        name: {"jobs": sorted(e["jobs"]), "variants": sorted(e["variants"], key=_torch_order)}
        for name, e in found.items()
        if len(e["jobs"]) > 1
    }


def _torch_order(variant: str) -> tuple[Version, str]:
    try:
        return Version(variant.removeprefix("torch-").split("+")[0]), variant
    except InvalidVersion:
        return Version("0"), variant


def all_passed(s3: Any, run: Mapping[str, Any], filename: str, job_id: str, jobs: list[str]) -> list[str]:
    """Mark ``job_id``'s pass of ``filename``; the jobs that have not passed it yet ([]: publish now)."""
    prefix = f"runs/{run['id']}/passed/{filename}/"
    s3.put_object(Bucket=run["bucket"], Key=f"{prefix}{job_id}", Body=b"")
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=run["bucket"], Prefix=prefix)
    marked = {o["Key"][len(prefix) :] for page in pages for o in page.get("Contents", [])}
    return [j for j in jobs if j not in marked]
