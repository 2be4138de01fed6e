"""A CUDA toolkit lock as a TOML file: the one rendering of what install_cuda.py installs.

tools/lock_cuda.py writes the repository's locks (buildspecs/images/scripts/cuda/) with it and the watcher the
stack's (``toolkits/`` in the bucket, wheelfoundry.toolkits.stack_toolkits), so both are byte-for-byte the same format
and a lock's sha256 means one thing wherever it is kept. Pure: a dict in, text out.
"""

from __future__ import annotations

import json
from typing import Any

from wheelfoundry.toolkits.toolkit_lock import Resolution

REPOSITORY_WRITER = "tools/lock_cuda.py"


def _q(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is a JSON string for these values


def document(found: Resolution) -> dict[str, Any]:
    """The lock of a wheel-only resolution (CUDA 13+: compiler and libraries from PyPI), as ``render`` takes it."""
    return {
        "cuda": found.cuda,
        "platform": found.platform,
        "release": found.release,
        "requirements": {k: list(v) for k, v in found.requirements.items()},
        "unavailable": dict(found.unavailable),
        "wheel": [w.__dict__ for w in found.wheels],
    }


def render(lock: dict[str, Any], writer: str = REPOSITORY_WRITER) -> str:
    out = [
        f"# CUDA {lock['cuda']} toolkit for {lock['platform']} (release {lock['release']}): every file with its",
        f"# published sha256. Written by {writer}; install_cuda.py installs it. Do not edit by hand.",
        f"schema = 1\ncuda = {_q(lock['cuda'])}\nplatform = {_q(lock['platform'])}\nrelease = {_q(lock['release'])}",
    ]
    if lock.get("redist"):
        r = lock["redist"]
        out.append(f"\n[redist]\nurl = {_q(r['url'])}\nmanifest = {_q(r['manifest'])}")
        out.append(f"manifest_sha256 = {_q(r['manifest_sha256'])}")
        out.append("pinned_by = [" + ", ".join(_q(s) for s in r["pinned_by"]) + "]")
        out.append(f"copy = {_q(r.get('copy', ''))}")
        if r.get("note"):
            out.append(f"note = {_q(r['note'])}")
    for a in lock.get("archive", []):
        out.append(f"\n[[archive]]\ncomponent = {_q(a['component'])}\nversion = {_q(a['version'])}")
        out.append(f"path = {_q(a['path'])}\nsha256 = {_q(a['sha256'])}\nsize = {a['size']}")
    for w in lock.get("wheel", []):
        out.append(f"\n[[wheel]]\nname = {_q(w['name'])}\nversion = {_q(w['version'])}\npart = {_q(w['part'])}")
        out.append(f"file = {_q(w['file'])}\nsha256 = {_q(w['sha256'])}\nurl = {_q(w['url'])}")
    out.append("\n[requirements]  # a catalog requirement line -> the locked wheels it stands for")
    out += [f"{_q(k)} = [{', '.join(_q(p) for p in v)}]" for k, v in sorted(lock.get("requirements", {}).items())]
    out.append("\n[unavailable]  # catalog lines with no wheel for this platform: refused at Validate")
    out += [f"{_q(k)} = {_q(v)}" for k, v in sorted(lock.get("unavailable", {}).items())]
    return "\n".join(out) + "\n"
