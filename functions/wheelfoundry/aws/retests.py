"""Validate's side of ``retest`` (request.retest): each wheel named is one the channel publishes now, read from
its index state, so the run records the bytes (sha256) Merge must find and the variants it already serves."""

from __future__ import annotations

from typing import Any

from wheelfoundry.errors import Issue, RequestInvalid
from wheelfoundry.publishing.index import channel_state


def retest_wheels(s3: Any, bucket: str, channel: str, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """``[{key, filename, sha256, variants}]`` of the request's ``retest``; RequestInvalid naming a key the channel
    does not serve (never published, removed or yanked)."""
    if not keys:
        return []
    wheels = channel_state(s3, bucket, channel).get("wheels") or {}
    out, issues = [], []
    for i, key in enumerate(keys):
        entry = wheels.get(key)
        if not isinstance(entry, dict) or not entry.get("sha256") or entry.get("yanked") is not None:
            why = "yanked" if isinstance(entry, dict) and entry.get("yanked") is not None else "not in its index"
            issues.append(Issue(f"retest[{i}]", f"{key}: channel {channel!r} does not serve it ({why})", key))
            continue
        variants = [str(v) for v in entry.get("variants") or []]
        out.append({"key": key, "filename": key.rsplit("/", 1)[1], "sha256": entry["sha256"], "variants": variants})
    if issues:
        raise RequestInvalid(issues)
    return out
