"""Torch releases a published wheel passed in after it was published (a retest, release day without a compile).

Each is one empty object beside the wheel, ``wheels/<ch>/<project>/<wheel>.served/torch-2.14.1+cpu``. The wheel's
bytes and its ``wf-variants`` metadata (the releases its build run tested) stay as published. Two retests of one
wheel that finish together write two markers, where a copy of the wheel onto itself with merged metadata would
keep only the later one; no S3 metadata limit (2 KB) caps how many releases a wheel serves. The index lists the
union (publishing.index reads the markers from the LIST it makes anyway: no more requests).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

SERVED = ".served/"
VARIANT = re.compile(r"torch-[0-9][0-9a-z.]*\+(cpu|cu[0-9]{2,4})")


def from_listing(keys: Iterable[str]) -> dict[str, list[str]]:
    """``{wheel key: [variant, ...]}`` from a channel's keys, each wheel's markers in key order."""
    found: dict[str, list[str]] = {}
    for key in sorted(keys):
        wheel, marker, variant = key.partition(SERVED)
        if marker and wheel.endswith(".whl") and VARIANT.fullmatch(variant):
            found.setdefault(wheel, []).append(variant)
    return found


def of_wheel(s3: Any, bucket: str, wheel_key: str) -> list[str]:
    """The variants a published wheel's markers name (one LIST)."""
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{wheel_key}{SERVED}")
    return from_listing(obj["Key"] for page in pages for obj in page.get("Contents", [])).get(wheel_key, [])


def mark(s3: Any, bucket: str, wheel_key: str, listed: Iterable[str], passed: Iterable[str]) -> list[str]:
    """Write a marker for each variant in ``passed`` the wheel does not list yet (``listed``: its ``wf-variants``;
    its markers are read here). The variants added, in ``passed``'s order."""
    have = {*listed, *of_wheel(s3, bucket, wheel_key)}
    added = [v for v in dict.fromkeys(passed) if VARIANT.fullmatch(v) and v not in have]
    for variant in added:
        s3.put_object(Bucket=bucket, Key=f"{wheel_key}{SERVED}{variant}", Body=b"", ContentType="text/plain")
    return added
