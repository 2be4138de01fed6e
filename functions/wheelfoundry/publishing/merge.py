"""Merged extension wheels: every (torch, CUDA) build of one project and Python in ONE wheel.

Each cell wheel (a slim build against one torch) is unpacked; its compiled extension modules and
anything else that differs per build (auditwheel's ``<pkg>.libs``, other shared libraries) move,
with their relative layout kept so ``$ORIGIN`` RPATHs still hold, to
``<dist>.wfbuilds/<build-id>/``. At each module's old place a generated stub (wheelfoundry.publishing.loader)
loads the build that matches the installed torch. Python files must be the same in every build:
the package's own code runs unchanged. ``Requires-Dist: torch`` covers exactly the builds' releases.
The output is deterministic (sorted entries, fixed timestamps): merging the same cells again gives
the same bytes, so a re-run finds its wheel unchanged instead of conflicting.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from wheelfoundry.errors import WheelFoundryError
from wheelfoundry.publishing.elf import is_plain_extension_module
from wheelfoundry.publishing.loader import render_stub

MODULE = re.compile(r"^(?P<mod>(?:[A-Za-z_][A-Za-z0-9_]*/)*[A-Za-z_][A-Za-z0-9_]*)\.(?:cpython-[^/]+|abi3)\.so$")
SHARED_LIBRARY = re.compile(r"\.so(\.[0-9]+)*$")
MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(\w+)$")
EPOCH = (1980, 1, 1, 0, 0, 0)


class MergeConflict(WheelFoundryError):
    """The cell wheels cannot share one wheel (their Python files differ, or they are not slim builds)."""


@dataclass(frozen=True)
class Build:
    build_id: str  # torch2.13-cpu: its folder in the merged wheel
    torch_version: str  # 2.13.0
    cuda: str | None  # 13.0, None for a CPU build
    wheel: Path


@dataclass(frozen=True)
class Merged:
    path: Path
    filename: str
    sha256: str
    size: int
    builds: tuple[str, ...]
    inputs_size: int  # the cell wheels' bytes together
    requires_torch: str
    metadata: bytes


def plain_modules(builds: Sequence[Mapping[str, bytes]]) -> frozenset[str]:
    """The ``<pkg>/<name>.so`` files (no ABI suffix) that define ``PyInit_<name>`` in every build holding them:
    extension modules all the same (``no_python_abi_suffix=True``), read from their bytes (wheelfoundry.publishing.elf).
    One build's copy without it makes the file a library loaded by path, for every build."""
    verdict: dict[str, bool] = {}
    for files in builds:
        for path, data in files.items():
            if path.endswith(".so") and not MODULE.match(path):
                verdict[path] = verdict.get(path, True) and is_plain_extension_module(path, data)
    return frozenset(p for p, ok in verdict.items() if ok)


def module_of(path: str, plain: frozenset[str]) -> str | None:
    """``a/b/_C`` for a Python extension module at ``path`` (suffixed, or in ``plain``), else None."""
    if match := MODULE.match(path):
        return match["mod"]
    return path.removesuffix(".so") if path in plain else None


def path_loaded(paths: Sequence[str], plain: frozenset[str] = frozenset()) -> list[str]:
    """Compiled files a package finds by path, which one merged wheel cannot serve for several builds.

    A Python extension module (``*.cpython-*.so``, ``*.abi3.so``, or a ``<name>.so`` in ``plain``: it defines
    ``PyInit_<name>``, :func:`plain_modules`) gets a loader stub in its place, and
    auditwheel's ``<pkg>.libs`` are reached from the moved modules through ``$ORIGIN``. Any other shared
    library sits where the package's own code looks for it (PyG's ``PathFinder().find_spec("_version_cpu",
    [dirname])`` + ``torch.ops.load_library``, ``ctypes.CDLL(os.path.join(dirname, ...))``, a FileFinder
    over EXTENSION_SUFFIXES): moved, it is not found; left, it serves one build only.
    """
    return sorted(
        p
        for p in paths
        if SHARED_LIBRARY.search(p) and module_of(p, plain) is None and not p.split("/", 1)[0].endswith(".libs")
    )


def torch_requirement(versions: Sequence[str]) -> str:
    """``torch>=2.12,<2.15,!=2.13.*``: the releases (major.minor) the builds cover, nothing else."""
    minors = sorted({Version(v).release[:2] for v in versions})
    low, high = minors[0], minors[-1]
    spec = [f">={low[0]}.{low[1]}", f"<{high[0]}.{high[1] + 1}"]
    spec += [f"!={low[0]}.{m}.*" for m in range(low[1], high[1]) if low[0] == high[0] and (low[0], m) not in minors]
    return "torch" + ",".join(spec)


def _platform(tags: frozenset[object], filename: str) -> tuple[int, int, str]:
    found = [MANYLINUX.match(str(getattr(t, "platform", ""))) for t in tags]
    parsed = [(int(m[1]), int(m[2]), m[3]) for m in found if m]
    if not parsed and all(str(getattr(t, "platform", "")) == "any" for t in tags):
        raise MergeConflict(  # a CUDA cell is refused before this (wfbuild.cuda.devicecode); a CPU cell may get here
            f"{filename}: a pure-Python wheel: its cell compiled nothing. If the package compiles its extension "
            "only behind a switch of its own (e.g. TLA_BUILD_LEGACY_CUDA=1), set it in the request's build_env; "
            "only compiled (manylinux) cell wheels merge"
        )
    if not parsed:
        raise MergeConflict(f"{filename}: not a repaired manylinux wheel; only manylinux cell wheels merge")
    return min(parsed)  # a wheel with several tags needs the oldest of them


def _read(build: Build) -> tuple[str, tuple[str, str, str], dict[str, tuple[bytes, int]]]:
    name, version, _, tags = parse_wheel_filename(build.wheel.name)
    files: dict[str, tuple[bytes, int]] = {}
    with zipfile.ZipFile(build.wheel) as zf:
        for info in zf.infolist():
            if not info.is_dir():
                # 0755 or 0644, never the umask of whoever packed the cell: the merged bytes depend on content alone
                files[info.filename] = (zf.read(info), 0o755 if (info.external_attr >> 16) & 0o111 else 0o644)
    tag = next(iter(tags))
    return str(name), (version.public, tag.interpreter, tag.abi), files


def _metadata(text: str, version: str, requirement: str) -> str:
    """METADATA with the public version and our torch requirement; the description is kept as is."""
    head, sep, body = text.partition("\n\n")
    out: list[str] = []
    skipping = False
    for line in head.splitlines():
        if line[:1] in (" ", "\t") and out:
            if not skipping:
                out.append(line)
            continue
        key, _, value = line.partition(":")
        skipping = False
        if key == "Version":
            line = f"Version: {version}"
        elif key == "Requires-Dist":
            try:
                skipping = canonicalize_name(Requirement(value.strip()).name) == "torch"
            except InvalidRequirement:
                skipping = False
            if skipping:
                continue
        out.append(line)
    out.append(f"Requires-Dist: {requirement}")
    return "\n".join(out) + "\n" + sep + body


def merge(builds: Sequence[Build], out_dir: Path) -> Merged:
    if not builds:
        raise MergeConflict("nothing to merge: no cell built")
    read = [(b, *_read(b)) for b in builds]
    plain = plain_modules([{p: d for p, (d, _) in files.items()} for *_, files in read])
    by_path = sorted({p for *_, files in read for p in path_loaded(list(files), plain)})
    if by_path:
        raise MergeConflict(
            f"{', '.join(by_path[:3])}{' ...' if len(by_path) > 3 else ''}: a shared library the package loads by "
            "path (not a Python extension module: no ABI suffix and no PyInit_ for its name), so one merged wheel "
            "cannot hold every build of it; use layout 'auto' or 'per-cell'"
        )
    names = {(name, key) for _, name, key, _ in read}
    if len(names) != 1:
        raise MergeConflict(f"the cell wheels are not one project, version and Python: {sorted(names)}")
    ((project, (public, interpreter, abi)),) = names
    dist = re.sub(r"[-_.]+", "_", project)
    plats = [_platform(parse_wheel_filename(b.wheel.name)[3], b.wheel.name) for b in builds]
    if len({p[2] for p in plats}) != 1:
        raise MergeConflict(f"the cell wheels are for different architectures: {plats}")
    glibc = max(p[:2] for p in plats)
    platform = f"manylinux_{glibc[0]}_{glibc[1]}_{plats[0][2]}"
    requirement = torch_requirement([b.torch_version for b in builds])
    shared: dict[str, tuple[bytes, int, str]] = {}  # path -> (bytes, mode, from which build)
    per_build: dict[str, dict[str, tuple[bytes, int]]] = {}
    modules: dict[str, dict[str, str]] = {}  # module path (a/b/_C) -> build id -> file inside the wheel
    metadata_text = ""
    dist_info: dict[str, tuple[bytes, int]] = {}
    for build, _, _, files in read:
        root = f"{dist}.wfbuilds/{build.build_id}/"
        per_build[build.build_id] = {}
        for path, (data, mode) in files.items():
            top = path.split("/", 1)[0]
            if top.endswith(".dist-info"):
                rest = path.split("/", 1)[1]
                if rest == "METADATA" and not metadata_text:
                    metadata_text = data.decode("utf-8")
                elif rest not in ("RECORD", "WHEEL", "METADATA") and rest not in dist_info:
                    dist_info[rest] = (data, mode)
                continue
            module = module_of(path, plain)
            if module or top.endswith(".libs") or SHARED_LIBRARY.search(path):
                per_build[build.build_id][root + path] = (data, mode)
                if module:
                    modules.setdefault(module, {})[build.build_id] = root + path
                continue
            if path in shared and shared[path][0] != data:
                raise MergeConflict(
                    f"{path} differs between builds {shared[path][2]} and {build.build_id}: a merged wheel holds one "
                    "copy of the package's Python files (use layout 'per-cell' for builds that generate them)"
                )
            shared.setdefault(path, (data, mode, build.build_id))
    entries: dict[str, tuple[bytes, int]] = {p: (d, m) for p, (d, m, _) in shared.items()}
    for files in per_build.values():
        entries.update(files)
    table = [(b.build_id, ".".join(map(str, Version(b.torch_version).release[:2])), b.cuda) for b in builds]
    for mod, where in modules.items():
        stub = f"{mod}.py"
        if stub in entries:
            raise MergeConflict(f"{stub} exists beside the compiled module {mod}: the loader stub needs its place")
        rows = [(bid, torch, cuda, where[bid]) for bid, torch, cuda in table if bid in where]
        entries[stub] = (render_stub(mod.replace("/", "."), project, rows).encode(), 0o644)
    info_dir = f"{dist}-{public}.dist-info"
    entries.update({f"{info_dir}/{k}": v for k, v in dist_info.items()})
    metadata = _metadata(metadata_text, public, requirement).encode()
    entries[f"{info_dir}/METADATA"] = (metadata, 0o644)
    wheel_text = (
        "Wheel-Version: 1.0\nGenerator: wheelfoundry merge\nRoot-Is-Purelib: false\n"
        f"Tag: {interpreter}-{abi}-{platform}\n"
    )
    entries[f"{info_dir}/WHEEL"] = (wheel_text.encode(), 0o644)
    filename = f"{dist}-{public}-{interpreter}-{abi}-{platform}.whl"
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / filename
    _write(target, entries, f"{info_dir}/RECORD")
    data = target.read_bytes()
    return Merged(
        path=target,
        filename=filename,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        builds=tuple(b.build_id for b in builds),
        inputs_size=sum(b.wheel.stat().st_size for b in builds),
        requires_torch=requirement,
        metadata=metadata,
    )


def _write(path: Path, entries: dict[str, tuple[bytes, int]], record: str) -> None:
    rows = []
    order = sorted(entries, key=lambda p: (".dist-info/" in p, p))  # dist-info last, as wheels do
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in order:
            data, mode = entries[name]
            info = zipfile.ZipInfo(name, date_time=EPOCH)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append((name, f"sha256={digest}", str(len(data))))
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerows([*rows, (record, "", "")])
        info = zipfile.ZipInfo(record, date_time=EPOCH)
        info.external_attr = 0o100644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(info, out.getvalue())
