"""Per CUDA cell, the architectures its build holds: what `status`, `local run` and the corpus print.

The records are the job manifests' ``device_code`` (buildspecs/wfbuild/cuda/devicecode.py: read from the cell's
compiled files before repair; a refused cell has one too, saying why).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def cell_line(cell: str, record: Mapping[str, Any]) -> str:
    """``<cell>: SASS sm_90; PTX compute_90 (arch list 9.0+PTX: covered)``, or the refusal."""
    sass, ptx = record.get("sass") or [], record.get("ptx") or []
    parts = [f"SASS {' '.join(sass)}" if sass else "", f"PTX {' '.join(ptx)}" if ptx else ""]
    held = "; ".join(p for p in parts if p) or "no device code"
    arch_list = record.get("arch_list") or "-"
    if record.get("status") == "ok":
        return f"{cell}: {held} (arch list {arch_list}: covered)"
    return f"{cell}: {held} (arch list {arch_list}): REFUSED, {record.get('problem') or 'see the log'}"


def lines(manifests: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    """The cells of every job manifest that has device code records, sorted by cell."""
    rows = []
    for manifest in manifests.values():
        for cell, record in sorted(((manifest or {}).get("device_code") or {}).items()):
            if isinstance(record, Mapping):
                rows.append(f"  {cell_line(str(cell), record)}")
    return ["device code (per CUDA cell, read from its compiled files):", *sorted(rows)] if rows else []
