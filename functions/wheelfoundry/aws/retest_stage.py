"""Merge's side of ``retest``: stage the channel's published stable wheels, byte for byte, for the test jobs.

Validate recorded each wheel's key and the sha256 the channel's index state holds (aws.retests); the bytes read
now must hash to it. A wheel serves the test cells of its Python (its tag's, or every later one for abi3), its
platform and its CUDA major; Merge stages it once per test job with those cells and their variants, which
Collect adds to the published wheel's record once the test passed (aws.results).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError
from packaging.utils import parse_wheel_filename

from wheelfoundry.publishing.merge import MergeConflict
from wheelfoundry.request.stable_wheels import serves_python, stable_kind, stable_label


def _contract(s3: Any, bucket: str, key: str) -> dict[str, Any]:
    try:
        value = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except (ClientError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def serves(filename: str, cell: dict[str, Any], platform: str) -> bool:
    """Whether the stable wheel ``filename`` is one for this test cell (Python, CUDA major) on ``platform``."""
    _, version, _, tags = parse_wheel_filename(filename)
    kind = (stable_label(version) or ("", ""))[1]
    if kind != stable_kind(str(cell.get("cuda") or "cpu")):
        return False
    return any(t.platform.endswith(platform) for t in tags) and serves_python(filename, str(cell["python"]))


def retest_stagings(
    s3: Any, run: dict[str, Any], tmp: Path, tests: list[dict[str, Any]]
) -> list[tuple[dict[str, Any], Path, str, list[dict[str, Any]]]]:
    """(test job, local wheel, sha256, the job's cells it serves) for each retest wheel and test job it serves,
    its bytes checked against the channel's index state."""
    bucket, found = run["bucket"], []
    for entry in run["retest"]:
        path = tmp / "retest" / entry["filename"]
        path.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, entry["key"], str(path))
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != entry["sha256"]:
            why = f"{entry['key']}: its bytes hash to {digest}, the channel's index says {entry['sha256']}"
            raise MergeConflict(why)
        for test in tests:
            contract = _contract(s3, bucket, f"{test['prefix']}job.json")
            cells = (contract.get("extension") or {}).get("cells") or []
            mine = [c for c in cells if serves(entry["filename"], c, str(contract.get("platform")))]
            if mine:
                found.append((test, path, digest, mine))
    return found
