"""Stable-ABI wheels in a request: their names (a kind per CUDA major, the +abi<floor><kind> label, public
versions for PyPI, the Pythons their tags install on) and ``retest``, published stable wheels a request tests
on its cells instead of building (release day without a compile). What the names say is checked here, before
anything is read or launched; that each retest wheel is the channel's, with the bytes it published, Validate
reads from the channel's index state (aws.retests).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from wheelfoundry.errors import Issue

# A stable wheel's local label: its torch floor and CUDA major (planning.cells.stable_label).
STABLE_LABEL = re.compile(r"^abi(?P<major>[0-9])(?P<minor>[0-9]+)(?P<kind>cpu|cu[0-9]{2})$")


def stable_label(version: Version) -> tuple[str, str] | None:
    """(floor, CUDA major) of a stable wheel's local label (``abi213cpu`` -> ("2.13", "cpu")), else None."""
    match = STABLE_LABEL.fullmatch(version.local or "")
    return (f"{match['major']}.{match['minor']}", match["kind"]) if match else None


def stable_kind(cuda: str) -> str:
    """The kind of stable wheel a request's ``cuda`` entry gets: cpu, or its CUDA major (13.0, 13.2 -> cu13)."""
    return "cpu" if cuda == "cpu" else f"cu{str(cuda).split('.')[0]}"


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
        kind = stable_kind(str(cuda))
        if kinds and kind not in kinds:
            why = f"no retest wheel is built for {kind} (the wheels are {', '.join(sorted(kinds))})"
            issues.append(Issue(f"cuda[{i}]", why, cuda, tuple(sorted(kinds))))
    return issues


def name_issues(data: Mapping[str, Any]) -> list[Issue]:
    """abi stable: one wheel per kind (cpu, cu12, cu13), Python and platform. Without local versions the kinds'
    wheels would share a name; with them PyPI refuses the label (+abi213cu13): said before the build."""
    if data.get("abi") != "stable":
        return []
    kinds = sorted({stable_kind(str(c)) for c in data.get("cuda") or ()})
    if data.get("local_version") is False and len(kinds) > 1:
        why = f"abi stable without local versions gives the {', '.join(kinds)} wheels one name: request one of them"
        return [Issue("local_version", why, False, ("true", "one CUDA major (or cpu) per request"))]
    options = data.get("options") or {}
    publish = options.get("publish")
    target = publish.get("repository") if isinstance(publish, Mapping) else publish
    if target in ("pypi", "testpypi") and data.get("local_version") is not False:
        why = (f"abi stable wheels carry a local version label (+abi<floor><cpu|cuNN>), which {target} refuses: "
               "set local_version false (one CUDA major, or cpu, per request) for a public version")  # fmt: skip
        return [Issue("options.publish", why, target, ("local_version false",))]
    return []


def python_free(filename: str) -> bool:
    """Whether a wheel's name serves every Python from its tag's on (``cp39-abi3``, ``py3-none``)."""
    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return False
    return bool(tags) and all((found := tag_python(t)) is not None and found[1] for t in tags)


def tag_python(tag: Tag) -> tuple[tuple[int, int], bool] | None:
    """(the CPython a wheel tag names, whether it installs on every later one too): cp312-cp312 ((3, 12), False);
    cp39-abi3 ((3, 9), True); py39-none ((3, 9), True), as xFormers 0.0.35 ships; py3-none ((3, 0), True). None for
    anything else (PyPy, Python 2)."""
    match = re.fullmatch(r"(cp|py)3([0-9]*)", tag.interpreter)
    if not match or (match[1] == "py" and tag.abi != "none") or (match[1] == "cp" and not match[2]):
        return None
    return (3, int(match[2] or 0)), match[1] == "py" or tag.abi == "abi3"


def serves_python(filename: str, python: str) -> bool:
    """Whether a wheel's tags install on CPython ``python`` (3.12): its own cpXY, abi3 from cpXY on, py3Y from 3.Y
    on, or py3."""
    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return False
    major, minor = (int(p) for p in python.split(".")[:2])
    for tag in tags:
        found = tag_python(tag)
        if found and (found[0] == (major, minor) or (found[1] and found[0] <= (major, minor))):
            return True
    return False
