"""Which torch release added each C-shim function, read from the shim headers of the torch a cell built with.

torch keeps this list as ``torch/csrc/stable/c/shim_function_versions.txt`` in its source tree, but the wheel
does not ship it (torch 2.13.0: not in the wheel). The wheel's headers carry the same facts: every shim added
from 2.10 on is declared inside ``#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_<minor>_0`` (the stable ABI's
own ``torch/csrc/stable/c/shim.h``, AOTInductor's ``aoti_torch/c/shim.h`` and its generated
``c_shim_{aten,cpu,cuda,...}.h``). A shim declared outside any such guard predates the versioning and never
raises a floor. The headers of the build env are the right ones: a file can only import what they declared.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from wfbuild.envs import BASE_PTH

SHIM_FOLDERS = ("torch/csrc/stable", "torch/csrc/inductor/aoti_torch")
BASE_SITE = re.compile(r'addsitedir\((".*")\)')  # _wf_base.pth's line (wfbuild.envs.link_base): a JSON string
GUARD = re.compile(r"^\s*#\s*if\s+TORCH_FEATURE_VERSION\s*>=\s*TORCH_VERSION_(\d+)_(\d+)_\d+\s*(?://.*)?$")
OPENS = re.compile(r"^\s*#\s*if(?:n?def)?\b")
SWITCHES = re.compile(r"^\s*#\s*(?:else|elif)\b")
CLOSES = re.compile(r"^\s*#\s*endif\b")
# AOTI_TORCH_EXPORT <return type> <name>(: the declaration may span lines (its name on the next one).
DECLARED = re.compile(r"AOTI_TORCH_EXPORT\b[^;{}()]*?\b((?:aoti_torch|torch)_[A-Za-z0-9_]+)\s*\(")


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def include_dir(env_dir: Path) -> Path | None:
    """``<env>/lib/python3.X/site-packages/torch/include``: the cell env's torch headers (None: no torch). A cell's
    env is a thin venv over a cached one (wfbuild.envs.thin_env): its torch is in the site-packages its
    ``_wf_base.pth`` adds."""
    for site in sorted(env_dir.glob("lib/python3*/site-packages")):
        if (site / "torch" / "include").is_dir():
            return site / "torch" / "include"
        base = site / BASE_PTH
        added = BASE_SITE.search(base.read_text(encoding="utf-8")) if base.is_file() else None
        if added and (Path(json.loads(added[1])) / "torch" / "include").is_dir():
            return Path(json.loads(added[1])) / "torch" / "include"
    return None


def header_versions(text: str) -> dict[str, str | None]:
    """Each shim function ``text`` declares -> the X.Y its version guard needs (None: declared unguarded)."""
    stack: list[str | None] = []  # per open #if: the version it requires (None: another condition)
    blocks: dict[str | None, list[str]] = {}
    for line in text.splitlines():
        if guard := GUARD.match(line):
            stack.append(f"{guard[1]}.{guard[2]}")
            continue
        if OPENS.match(line):
            stack.append(None)
        elif SWITCHES.match(line) and stack:
            stack[-1] = None  # the #else of a version guard is the older torch's branch
        elif CLOSES.match(line) and stack:
            stack.pop()
        else:
            needed = [v for v in stack if v]
            blocks.setdefault(max(needed, key=version_key) if needed else None, []).append(line)
    out: dict[str, str | None] = {}
    for version, lines in sorted(blocks.items(), key=lambda kv: version_key(kv[0] or "0")):
        for name in DECLARED.findall("\n".join(lines)):
            out.setdefault(name, version)  # the oldest declaration counts
    return out


def versions(include: Path) -> dict[str, str | None]:
    """shim function -> the torch (X.Y) that added it, over every shim header under ``include``; None for a
    function some header declares outside any version guard: older than the versioning (torch < 2.10)."""
    found: dict[str, str | None] = {}
    for folder in SHIM_FOLDERS:
        for header in sorted((include / folder).rglob("*.h")):
            for name, version in header_versions(header.read_text(encoding="utf-8", errors="replace")).items():
                old = found.get(name, "")
                if name not in found or version is None or (old and version_key(version) < version_key(old)):
                    found[name] = version
    return dict(sorted(found.items()))
