"""Estimated against actual, per job, and what the next plan of the same source learns from it.

Collect reads a finished job's manifest (its stages' start and end times) and the contract Validate wrote
(the estimate); ``job_timing`` is what it adds to the job's result. Report lists them in report.json
(``timing``) and folds the extension cells into ``calibration/<source>.json`` (wheelfoundry.planning.calibration),
which Validate reads when it plans that source again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from wheelfoundry.config import FarmConfig
from wheelfoundry.planning import calibration


def calibration_key(scope: str) -> str:
    """Where a source's recorded cells live: one object per source scope (buildenv.extension_cache_scope)."""
    return f"calibration/{hashlib.sha256(scope.encode()).hexdigest()[:24]}.json"


def job_timing(contract: Mapping[str, Any], manifest: Mapping[str, Any], config: FarmConfig) -> dict[str, Any]:
    """The job's estimate, its build's actual hours on the host (first stage start to last stage end; the
    estimate's setup also covers the launch before it) and, for an extension, its cells' recorded costs."""
    stages = [s for s in manifest.get("stages") or [] if isinstance(s, Mapping)]
    starts = [float(s["started_at"]) for s in stages if isinstance(s.get("started_at"), int | float)]
    ends = [float(s["ended_at"]) for s in stages if isinstance(s.get("ended_at"), int | float)]
    actual = round((max(ends) - min(starts)) / 3600, 3) if starts and ends else None
    out: dict[str, Any] = {"estimated_hours": (contract.get("estimate") or {}).get("hours"), "actual_hours": actual}
    if contract.get("extension"):
        cells = calibration.cells_of(contract, manifest, config)
        # positional to keep the Map's result small; the peak compiler (GiB) and wheel bytes where measured
        out["cells"] = [
            [
                c["archs"],
                c["compile_core_hours"],
                c["serial_hours"],
                bool(c["cuda"]),
                c.get("peak_gib"),
                c.get("wheel_bytes"),
            ]
            for c in cells
        ]
    return out


def report_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """report.json's ``timing``: per job, estimated and actual hours and their ratio."""
    rows = []
    for result in results:
        timing = result.get("timing") or {}
        est, actual = timing.get("estimated_hours"), timing.get("actual_hours")
        ratio = (
            round(actual / est, 2) if isinstance(est, int | float) and est and isinstance(actual, int | float) else None
        )
        rows.append(
            {"job_id": result.get("job_id"), "estimated_hours": est, "actual_hours": actual, "actual/estimated": ratio}
        )
    return rows


def record_cells(s3: Any, run: Mapping[str, Any], results: list[dict[str, Any]]) -> int:
    """Fold this run's extension cells into the source's calibration record; the number of cells added."""
    key = run.get("calibration_key")
    cells = [
        {"cuda": c[3], "archs": c[0], "compile_core_hours": c[1], "serial_hours": c[2]}
        | {k: v for k, v in zip(("peak_gib", "wheel_bytes"), c[4:6], strict=False) if v is not None}
        for r in results
        for c in (r.get("timing") or {}).get("cells") or []
        if isinstance(c, list) and len(c) in (4, 6)
    ]
    if not key or not cells:
        return 0
    try:
        record = json.loads(s3.get_object(Bucket=run["bucket"], Key=key)["Body"].read())
    except (ClientError, ValueError):
        record = None
    body = calibration.updated(record, key, str(run["id"]), cells)
    s3.put_object(Bucket=run["bucket"], Key=key, Body=json.dumps(body, indent=1))
    return len(cells)


def read_record(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    """A source's recorded cells, or None (never recorded, or unreadable: the catalog's model then)."""
    try:
        record = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except (ClientError, ValueError):
        return None
    return record if isinstance(record, dict) else None
