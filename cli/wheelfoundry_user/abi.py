"""Per extension job, one line on what its builds are: LibTorch's stable ABI (and from which torch the files
run) or per-torch (and the C++ symbol that binds them). What `status` prints.

The records are the job manifests' ``abi`` (buildspecs/wfbuild/wheels/abi.py: each cell's compiled files' dynamic
imports, read after its build).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SHOWN = 3


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def job_line(job: str, cells: Mapping[str, Any]) -> str | None:
    """``<job>: stable, floor torch 2.10 (torch_call_dispatcher)`` or ``<job>: per-torch: _C.so imports ...``."""
    records = [r for _, r in sorted(cells.items()) if isinstance(r, Mapping) and r.get("files")]
    if not records:
        return None
    bound = [
        (name, rec)
        for r in records
        for name, rec in sorted((r.get("files") or {}).items())
        if isinstance(rec, Mapping) and not rec.get("stable")
    ]
    if bound:
        name, rec = bound[0]
        symbols = ", ".join((rec.get("torch_symbols") or [])[:SHOWN]) or "libtorch C++ symbols"
        count = int(rec.get("torch_symbols_count") or 0)
        more = f" (+{count - SHOWN} more)" if count > SHOWN else ""
        per = sum(1 for r in records if not r.get("stable"))
        return f"{job}: per-torch: {name.rsplit('/', 1)[-1]} imports {symbols}{more} ({per} of {len(records)} cell(s))"
    floors = sorted({str(r.get("floor")) for r in records if r.get("floor")}, key=_key)
    why = sorted({s for r in records for f in (r.get("files") or {}).values() for s in f.get("floor_symbols") or []})
    if len(floors) == 1:
        because = ", ".join(why[:SHOWN]) if why else str(records[0].get("target_from") or "its target")
        return f"{job}: stable, floor torch {floors[0]} ({because})"
    span = f"{floors[0]}..{floors[-1]}" if floors else "-"
    return f"{job}: stable, floors torch {span} by cell (set TORCH_TARGET_VERSION for one floor)"


def lines(manifests: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    """One line per job whose manifest has ABI records, sorted by job."""
    rows = []
    for job, manifest in sorted(manifests.items()):
        cells = (manifest or {}).get("abi")
        line = job_line(str(job), cells) if isinstance(cells, Mapping) else None
        if line:
            rows.append(f"  {line}")
    return ["ABI (per job, read from its compiled files' imports):", *rows] if rows else []
