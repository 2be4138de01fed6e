"""``retest``: published stable-ABI wheels a request tests on its cells instead of building (issue: release day
without a compile). What the names say is checked here, before anything is read or launched; that each wheel
is the channel's, with the bytes it published, Validate reads from the channel's index state (aws.retests).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from wheelfoundry.errors import Issue

# A stable wheel's local label: its torch floor and CUDA major (planning.cells.stable_label).
STABLE_LABEL = re.compile(r"^abi(?P<major>[0-9])(?P<minor>[0-9]+)(?P<kind>cpu|cu[0-9]{2})$")


def stable_label(version: Version) -> tuple[str, str] | None:
    """(floor, CUDA major) of a stable wheel's local label (``abi213cpu`` -> ("2.13", "cpu")), else None."""
    match = STABLE_LABEL.fullmatch(version.local or "")
    return (f"{match['major']}.{match['minor']}", match["kind"]) if match else None


def kind_of(label: str) -> str:
    """The CUDA major a variant label belongs to: cu130, cu132 -> cu13; cpu -> cpu."""
    return "cpu" if label == "cpu" else label[:4]


def retest_issues(data: Mapping[str, Any], torch: Mapping[str, str]) -> list[Issue]:
    """What is wrong with ``data["retest"]`` against the request's name, channel, abi, CUDA and ``torch``
    (spec -> version): each key in the channel, a wheel of the package, stable, its floor at or below every
    torch asked for; every CUDA major asked for has a wheel."""
    keys = data.get("retest")
    if not isinstance(keys, list) or not keys:
        return []
    if data.get("abi") == "per-torch":
        return [Issue("abi", "retest tests published stable-ABI wheels; per-torch builds each torch", "per-torch",
                      ("auto", "stable"))]  # fmt: skip
    channel, project = data.get("channel") or "extensions", canonicalize_name(str(data.get("name", "")))
    issues, kinds = [], set()
    for i, key in enumerate(keys):
        where, parts = f"retest[{i}]", str(key).split("/")
        if len(parts) != 4 or parts[1] != channel or parts[2] != project:
            why = f"{key!r} is not a wheel of {project} in channel {channel!r}"
            issues.append(Issue(where, why, key, (f"wheels/{channel}/{project}/<file>.whl",)))
            continue
        try:
            name, version, _, _ = parse_wheel_filename(parts[3])
        except InvalidWheelFilename as exc:
            issues.append(Issue(where, f"{key!r}: {exc}", key))
            continue
        label = stable_label(version)
        if canonicalize_name(name) != project or label is None:
            why = f"{parts[3]} is not a stable-ABI wheel of {project} (its label is not +abi<floor><cpu|cuNN>)"
            issues.append(Issue(where, why, key))
            continue
        floor, kind = label
        kinds.add(kind)
        below = [v for v in torch.values() if Version(v) < Version(floor)]
        if below:
            why = f"{parts[3]} requires torch>={floor}; the request names torch {', '.join(below)}"
            issues.append(Issue(where, why, key))
    for i, cuda in enumerate(data.get("cuda") or ()):
        kind = "cpu" if cuda == "cpu" else f"cu{str(cuda).split('.')[0]}"
        if kinds and kind not in kinds:
            why = f"no retest wheel is built for {kind} (the wheels are {', '.join(sorted(kinds))})"
            issues.append(Issue(f"cuda[{i}]", why, cuda, tuple(sorted(kinds))))
    return issues
