"""Merge: after every job of a merged-layout extension run, one wheel per (Python, platform).

Runs on Lambda after the Map (docs/contracts.md §6 says why there and not on the last instance).
The builds are untrusted: cells come from job.json (written by Validate), each wheel is read from
its job's own prefix and its bytes must hash to what the job's manifest says. A cell with no
smoke-tested wheel is *missing*: the merged wheel goes out without it and the run names it, unless
the request set ``require_all_cells``, in which case nothing of that run is merged or published.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError
from packaging.utils import canonicalize_name, parse_wheel_filename

from wheelfoundry.aws.results import safe_wheel_name
from wheelfoundry.merge import Build, MergeConflict, merge


def _json(s3: Any, bucket: str, key: str) -> Any:
    try:
        return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except (ClientError, ValueError):
        return None


def _sha256(s3: Any, bucket: str, key: str) -> str | None:
    try:
        head = s3.head_object(Bucket=bucket, Key=key)
    except ClientError:
        return None
    value = head.get("Metadata", {}).get("sha256")
    return value if isinstance(value, str) else None


def built_cells(s3: Any, bucket: str, job: dict[str, Any]) -> tuple[list[tuple[dict[str, Any], str]], list[str]]:
    """([(cell, wheel key)], missing cell ids) of one job."""
    prefix = job["prefix"]
    contract = _json(s3, bucket, f"{prefix}job.json") or {}
    cells = {c["id"]: c for c in (contract.get("extension") or {}).get("cells", [])}
    result = _json(s3, bucket, f"{prefix}result.json") or {}
    manifest = _json(s3, bucket, f"{prefix}manifest.json") if result.get("status") in ("succeeded", "partial") else None
    found: dict[str, tuple[dict[str, Any], str]] = {}
    for wheel in (manifest or {}).get("wheels", []):
        cell_id = str((wheel.get("cell") or {}).get("id"))
        if wheel.get("smoke") != "passed" or cell_id not in cells:
            continue
        name = safe_wheel_name(job["id"], wheel.get("name"))
        found[cell_id] = (
            {**cells[cell_id], "sha256": wheel.get("sha256"), **_where(contract)},
            f"{prefix}wheels/{name}",
        )
    return list(found.values()), [c for c in cells if c not in found]


def _where(contract: dict[str, Any]) -> dict[str, Any]:
    name = (contract.get("extension") or {}).get("name", "")
    return {"platform": contract.get("platform"), "cuda": contract.get("cuda"), "project": name}


def merge_run(event: dict[str, Any], s3: Any, work: Path | None = None) -> dict[str, Any]:
    run = event["run"]
    bucket, channel = run["bucket"], run["channel"]
    groups: dict[tuple[str, str], list[tuple[dict[str, Any], str]]] = defaultdict(list)
    missing: list[str] = []
    for job in event.get("jobs") or []:
        cells, lost = built_cells(s3, bucket, job)
        missing += lost
        for cell, key in cells:
            groups[(cell["python"], cell["platform"])].append((cell, key))
    out: dict[str, Any] = {"status": "succeeded", "published": [], "unchanged": [], "conflicts": [], "wheels": []}
    out["missing_cells"] = sorted(missing)
    if missing and run.get("require_all_cells"):
        out["status"] = "failed"
        out["error"] = f"require_all_cells: {len(missing)} cell(s) did not build: {', '.join(sorted(missing))}"
    else:
        with tempfile.TemporaryDirectory(dir=work) as tmp:
            for (python, platform), cells in sorted(groups.items()):
                _merge_group(s3, bucket, channel, Path(tmp) / f"{python}-{platform}", cells, out)
        if missing or out["conflicts"]:
            out["status"] = "partial"
    s3.put_object(Bucket=bucket, Key=f"runs/{run['id']}/merge.json", Body=json.dumps(out, indent=2).encode())
    return out


def _merge_group(
    s3: Any, bucket: str, channel: str, tmp: Path, cells: list[tuple[dict[str, Any], str]], out: dict[str, Any]
) -> None:
    tmp.mkdir(parents=True)
    builds = []
    for cell, key in sorted(cells, key=lambda c: (c[0]["torch_version"], c[0].get("cuda") or "")):
        path = tmp / key.rsplit("/", 1)[1]
        s3.download_file(bucket, key, str(path))
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != cell["sha256"]:
            raise MergeConflict(f"{key}: its bytes hash to {digest}, the manifest says {cell['sha256']}")
        if canonicalize_name(parse_wheel_filename(path.name)[0]) != canonicalize_name(cell["project"]):
            raise MergeConflict(f"{key} is not a wheel of {cell['project']}")
        builds.append(Build(cell["build_id"], cell["torch_version"], cell.get("cuda"), path))
    merged = merge(builds, tmp / "merged")
    project = canonicalize_name(parse_wheel_filename(merged.filename)[0])
    dest = f"wheels/{channel}/{project}/{merged.filename}"
    out["wheels"].append(
        {
            "filename": merged.filename,
            "key": dest,
            "sha256": merged.sha256,
            "size": merged.size,
            "cells_size": merged.inputs_size,
            "builds": list(merged.builds),
            "requires_torch": merged.requires_torch,
        }
    )
    existing = _sha256(s3, bucket, dest)
    if existing is not None:
        (out["unchanged"] if existing == merged.sha256 else out["conflicts"]).append(merged.filename)
        return
    requires_python = _requires_python(merged.metadata)
    s3.put_object(
        Bucket=bucket,
        Key=f"{dest}.metadata",
        Body=merged.metadata,
        ContentType="text/plain",
        Metadata={"sha256": hashlib.sha256(merged.metadata).hexdigest()},  # PEP 658's data-core-metadata
    )
    metadata = {"sha256": merged.sha256, **({"requires-python": requires_python} if requires_python else {})}
    s3.upload_file(str(merged.path), bucket, dest, ExtraArgs={"Metadata": metadata, "ContentType": "application/zip"})
    out["published"].append(merged.filename)


def _requires_python(metadata: bytes) -> str | None:
    for line in metadata.decode("utf-8").split("\n\n", 1)[0].splitlines():
        if line.startswith("Requires-Python:"):
            return line.split(":", 1)[1].strip()
    return None
