"""Reproducible builds: the same request, source and builder give the same wheel bytes.

Three things vary between two builds of the same source and are pinned here:

- **Time.** ``SOURCE_DATE_EPOCH`` comes from the source, never the clock: a git checkout's commit
  time (``meta/commits/<package>.epoch``, written by checkout.sh); a fetched archive's newest member
  mtime (``meta/sources/<package>.json``, written by wfbuild.runner.source; ``wheelfoundry local`` packs a
  source folder with every member at the folder's newest file mtime). setuptools' bdist_wheel,
  ``wheel pack`` and auditwheel stamp every zip entry with it (never before 1980, zip's epoch).
- **Paths.** Each job builds in a folder of its own (host mode: the instance's work root; the
  builder container: ``/work``). ``-ffile-prefix-map`` (GCC >= 8, clang >= 10: debug info,
  ``__FILE__`` and macros) rewrites the work folder to ``.`` and, in host mode, the shared cache (the
  torch headers of the cached build environments) to ``/cache``, the container's name for it.
  nvcc passes it to its host compiler (``NVCC_APPEND_FLAGS=-Xcompiler=...``, read by nvcc >= 11.5).
  nvcc's own front end needs per-file flags (a seed, the source's name under the source root): the
  launcher wfbuild.compiling.nvcc adds them (``wfbuild.compiling.nvcc.per_file_nvcc_flags``).
- **Archive order and modes.** ``normalize`` rewrites a finished wheel with its members sorted
  (``.dist-info`` last, RECORD at the end), one timestamp and modes 0644/0755 (not the umask's).
"""

from __future__ import annotations

import calendar
import json
import os
import time
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ZIP_EPOCH = 315532800  # 1980-01-01T00:00:00Z: a zip entry cannot be older
FLAG_VARIABLES = ("CFLAGS", "CXXFLAGS")  # setuptools (C and C++ compiles) and CMake read them


def prefix_map_flags(maps: Sequence[tuple[str, str]]) -> list[str]:
    """``-ffile-prefix-map=OLD=NEW`` per map; GCC takes the last matching one, so nested folders go last."""
    ordered = sorted((old.rstrip("/") or "/", new) for old, new in maps if old and old != new)
    return [f"-ffile-prefix-map={old}={new}" for old, new in sorted(ordered, key=lambda m: len(m[0]))]


def flags_env(maps: Sequence[tuple[str, str]], base: Mapping[str, str]) -> dict[str, str]:
    """The compiler variables of a build stage: ``base``'s values with the prefix maps appended."""
    flags = prefix_map_flags(maps)
    if not flags:
        return {}
    out = {name: " ".join(filter(None, [base.get(name, ""), *flags])) for name in FLAG_VARIABLES}
    nvcc = [f"-Xcompiler={flag}" for flag in flags]
    out["NVCC_APPEND_FLAGS"] = " ".join(filter(None, [base.get("NVCC_APPEND_FLAGS", ""), *nvcc]))
    return out


def source_date_epoch(meta: Path, package: str | None) -> tuple[int, str] | None:
    """(SOURCE_DATE_EPOCH, the rule that gave it) for the job's source, or None before it is fetched."""
    if not package:
        return None
    archive = meta / "sources" / f"{package}.json"
    if archive.is_file():
        record = json.loads(archive.read_text(encoding="utf-8"))
        if isinstance(record.get("source_date_epoch"), int):
            return max(ZIP_EPOCH, record["source_date_epoch"]), "newest member mtime of the source archive"
    commit = meta / "commits" / f"{package}.epoch"
    if commit.is_file():
        text = commit.read_text(encoding="utf-8").strip()
        if text.isdigit():
            return max(ZIP_EPOCH, int(text)), "commit time of the checked-out commit"
    return None


def archive_epoch(archive: Path) -> int:
    """The newest member mtime of a .tar.gz/.tgz or .zip source archive."""
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            stamps = [calendar.timegm((*i.date_time, 0, 0, 0)) for i in zf.infolist()]
    else:
        import tarfile

        with tarfile.open(archive, "r:*") as tf:
            stamps = [int(m.mtime) for m in tf.getmembers()]
    return max([ZIP_EPOCH, *stamps])


def epoch_env(meta: Path, package: str | None) -> dict[str, str]:
    found = source_date_epoch(meta, package)
    return {"SOURCE_DATE_EPOCH": str(found[0])} if found else {}


def _mode(info: zipfile.ZipInfo) -> int:
    if info.is_dir():
        return 0o40755
    return 0o100755 if (info.external_attr >> 16) & 0o111 else 0o100644


def _order(name: str) -> tuple[bool, bool, str]:
    return (".dist-info/" in name, name.endswith(".dist-info/RECORD"), name)


def normalize(wheel: Path, epoch: int) -> None:
    """Rewrite ``wheel`` in place: sorted members, one timestamp, modes 0644/0755, deflate level 6.

    Member bytes are unchanged, so RECORD stays true; only the container is made deterministic."""
    stamp = time.gmtime(max(ZIP_EPOCH, epoch))[:6]
    with zipfile.ZipFile(wheel) as zf:
        members = [(info, zf.read(info)) for info in zf.infolist() if not info.is_dir()]
    tmp = wheel.with_name(wheel.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        for info, data in sorted(members, key=lambda m: _order(m[0].filename)):
            fresh = zipfile.ZipInfo(info.filename, date_time=stamp)
            fresh.external_attr = _mode(info) << 16
            fresh.compress_type = zipfile.ZIP_DEFLATED
            fresh.create_system = 3  # unix, whatever wrote it before
            out.writestr(fresh, data, compresslevel=6)
    os.replace(tmp, wheel)


def record(meta: Path, package: str | None, kind: str) -> dict[str, Any]:
    """What the manifest says about this job's reproducibility, including where exact bytes are not promised."""
    found = source_date_epoch(meta, package)
    out: dict[str, Any] = {
        "source_date_epoch": found[0] if found else None,
        "source_date_epoch_rule": found[1] if found else "no source time recorded: the wheel's timestamps are 1980",
        "prefix_maps": "-ffile-prefix-map: the work folder to '.', in host mode the build cache to /cache",
        "archive": "members sorted, one timestamp, modes 0644/0755 (wfbuild.wheels.reproducible.normalize)",
        "nvcc": (
            "setuptools builds (torch.utils.cpp_extension with ninja): per .cu file -frandom-seed and cudafe++/cicc "
            "--orig_src_path_name from its path under the source root, tmpxft pid zeroed (wfbuild.compiling.nvcc)"
        ),
    }
    if kind == "pytorch":
        out["not_promised"] = (
            "framework builds get the same flags but are not verified byte-identical: torch's CMake build "
            "records its configuration (build-time paths of the builder's tools and CUDA in torch/share/cmake "
            "and the generated version.py) and large parallel link steps have not been compared here"
        )
    return out
