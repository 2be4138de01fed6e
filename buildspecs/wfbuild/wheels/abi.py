"""What a cell's build is, read from its compiled files' dynamic symbols: ``python3 -m wfbuild.wheels.abi``.

    python3 -m wfbuild.wheels.abi --in-dir RAW --cell ID --torch-version 2.13.0 --env-dir ENV --out RECORD.json
        [--src DIR]

Every ELF file of the cell's wheel(s) is read with pyelftools (the reader auditwheel uses; the tools env
has it). A file is **stable** (LibTorch's stable ABI: it runs on every later torch within the shims' window)
when it imports no C++ symbol of libtorch: none mangled in ``at::``, ``c10::``, ``caffe2::`` or ``torch::``
other than ``torch::stable`` and ``torch::headeronly``, anywhere in the name (a ``std::vector<at::Tensor>``
method binds to torch's layout too). Its C-shim imports (``aoti_torch_*``, ``torch_*``) are fine; its
**floor** is the newest torch any of them needs, from the version guards of the build env's own shim headers
(wfbuild.wheels.shims), never below the package's ``TORCH_TARGET_VERSION`` or, without one, the cell's torch: the
stable headers then compile code for that torch's ABI. A file that defines ``PyInit_<name>`` is a Python
extension module whatever its suffix. The record (per file: stable, floor, extension module, and the
symbols that decided it, at most five per reason) goes to the manifest, the provenance and ``status``.
It exits 0 unless it cannot read the wheels, or ``--require-stable OLDEST`` is given (a request's
``abi: stable``, OLDEST its oldest torch) and a file is per-torch or its floor is above OLDEST: then the
cell is refused, naming the file and the symbol or shim (:func:`refusals`).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from wfbuild.wheels import shims

IN_MEMORY = 64 << 20  # larger members are copied to a temporary file: pyelftools seeks all over them
SHOWN = 5  # symbols listed per reason
# libtorch's C++ namespaces in Itanium mangling, where a nested name or a qualified type starts: N2at...,
# N3c10..., N5torch..., after any const/volatile/ref qualifier (NK2at...: a const method). Checked against
# c++filt over torch 2.13's libtorch_cpu, libtorch_python and libc10 (56,358 mangled names): the same set.
# torch::stable and torch::headeronly are the stable ABI's own (header-only, never imported in practice).
TORCH_CXX = re.compile(r"N[rVKRO]*(?:2at|3c10|6caffe2|5torch(?!6stable|10headeronly))")
SHIM = re.compile(r"^(?:aoti_torch|torch)_[A-Za-z0-9_]+$")
# C++ globals of libtorch_python that are not mangled (THPVariableClass, THPDtypeType...): the Python binding.
THP = re.compile(r"^THP[A-Z]\w*$")
TARGET = re.compile(r"TORCH_TARGET_VERSION\W{0,4}(0x[0-9a-fA-F]{1,16})\b")
BUILD_FILES = ("setup.py", "CMakeLists.txt", "pyproject.toml", "setup.cfg", "build.py")
FLAG_VARIABLES = ("TORCH_TARGET_VERSION", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "NVCC_APPEND_FLAGS")


def symbols(stream: IO[bytes]) -> tuple[set[str], set[str]]:
    """(undefined, defined) dynamic symbol names of an ELF file; ValueError names what could not be read."""
    try:
        elf = ELFFile(stream)
        table = elf.get_section_by_name(".dynsym")
        if not isinstance(table, SymbolTableSection):
            return set(), set()  # a static object or a file with no dynamic symbols: it imports nothing
        undefined: set[str] = set()
        defined: set[str] = set()
        for sym in table.iter_symbols():
            if sym.name:
                (undefined if sym["st_shndx"] == "SHN_UNDEF" else defined).add(sym.name)
        return undefined, defined
    except (ELFError, KeyError, OSError) as exc:
        raise ValueError(f"unreadable ELF file: {exc}") from exc


def read_wheel(wheel: Path) -> dict[str, tuple[set[str], set[str]]]:
    """Each ELF member of ``wheel`` and its (undefined, defined) dynamic symbols."""
    out: dict[str, tuple[set[str], set[str]]] = {}
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory(prefix="wf-abi-") as scratch:
        for info in archive.infolist():
            if info.is_dir() or info.file_size < 64:
                continue
            with archive.open(info) as member:
                if member.read(4) != b"\x7fELF":
                    continue
            try:
                if info.file_size <= IN_MEMORY:
                    out[info.filename] = symbols(io.BytesIO(archive.read(info)))
                    continue
                path = Path(scratch) / "member"
                with archive.open(info) as member, path.open("wb") as handle:
                    shutil.copyfileobj(member, handle, 1 << 20)
                with path.open("rb") as handle:
                    out[info.filename] = symbols(handle)
                path.unlink()
            except ValueError as exc:
                raise ValueError(f"{wheel.name}:{info.filename}: {exc}") from exc
    return out


def demangle(names: Iterable[str]) -> dict[str, str]:
    """name -> its C++ form, by binutils' c++filt when the host has it (else the mangled names stay)."""
    names = sorted(set(names))
    if not names or shutil.which("c++filt") is None:
        return {n: n for n in names}
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return {n: n for n in names}
    lines = out.stdout.splitlines()
    return dict(zip(names, lines)) if len(lines) == len(names) else {n: n for n in names}  # noqa: B905 (checked)


def torch_bound(name: str) -> bool:
    """An import that binds the file to one torch's C++ ABI."""
    return (name.startswith("_Z") and TORCH_CXX.search(name) is not None) or THP.match(name) is not None


def classify(undefined: set[str], defined: set[str], table: Mapping[str, str | None], target: str) -> dict[str, Any]:
    """One file's record. ``table``: shim function -> the torch (X.Y) that added it (None: before 2.10, when
    the versioning began); ``target``: X.Y."""
    bound = sorted(n for n in undefined if torch_bound(n))
    used = sorted(n for n in undefined if SHIM.match(n))
    versioned = {n: v for n in used if (v := table.get(n))}
    floor = max([target, *versioned.values()], key=shims.version_key)
    modules = sorted(n.removeprefix("PyInit_") for n in defined if n.startswith("PyInit_"))
    return {
        "stable": not bound,
        "floor": floor if not bound else None,  # a per-torch file runs on the torch it was built with only
        "uses_torch": bool(bound or used),
        "extension_module": modules[0] if modules else None,  # the PyInit_<name> it defines: Python imports it
        "torch_symbols": bound[:SHOWN],  # mangled; demangled by :func:`explain`
        "torch_symbols_count": len(bound),
        "floor_symbols": sorted(n for n, v in versioned.items() if v == floor)[:SHOWN],  # empty: the target's
        "shims": len(used),
        "unknown_shims": [n for n in used if n not in table][:SHOWN],  # not in the build torch's headers
    }


def target_of(torch_version: str, src: Path | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """(X.Y, where it came from): the package's TORCH_TARGET_VERSION (its flags, then its build files), else
    the cell's torch, whose ABI the stable headers compile for without one."""
    found = [("$" + FLAG_VARIABLES[0], f"{FLAG_VARIABLES[0]}={environ.get(FLAG_VARIABLES[0], '')}")]
    found += [(f"${name}", environ.get(name, "")) for name in FLAG_VARIABLES[1:]]
    for path in [src / name for name in BUILD_FILES] if src is not None else []:
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 1 << 20:
            found.append((path.name, path.read_text(encoding="utf-8", errors="replace")))
    for where, text in found:
        if match := TARGET.search(text):
            value = int(match[1], 16)
            return f"{value >> 56}.{(value >> 48) & 0xFF}", f"TORCH_TARGET_VERSION in {where}"
    major, minor = [*torch_version.split("+")[0].split("."), "0"][:2]
    return f"{major}.{minor}", f"the cell's torch {torch_version} (no TORCH_TARGET_VERSION found)"


def explain(files: dict[str, dict[str, Any]]) -> None:
    """Demangle the deciding symbols in place, so the record reads ``at::get_num_threads()``."""
    plain = demangle(n for rec in files.values() for n in rec["torch_symbols"])
    for rec in files.values():
        rec["torch_symbols"] = [plain.get(n, n) for n in rec["torch_symbols"]]


def record(
    cell: str, torch_version: str, wheels: list[Path], table: Mapping[str, str | None], target: tuple[str, str]
) -> dict[str, Any]:
    files = {
        name: classify(undefined, defined, table, target[0])
        for wheel in wheels
        for name, (undefined, defined) in sorted(read_wheel(wheel).items())
    }
    explain(files)
    stable = all(rec["stable"] for rec in files.values())
    floors = [rec["floor"] for rec in files.values() if rec["floor"]]
    return {
        "cell": cell,
        "torch_version": torch_version,
        "target": target[0],
        "target_from": target[1],
        "shim_table": len(table),  # shim functions declared in the build torch's headers
        "wheels": [w.name for w in wheels],
        "files": files,
        "stable": bool(files) and stable,
        "floor": max(floors, key=shims.version_key) if stable and floors else None,
    }


def refusals(rec: Mapping[str, Any], oldest: str) -> list[str]:
    """Why a cell's wheels may not be published as one wheel for torch >= ``oldest`` (X.Y): each file bound to
    the torch it was built with (its first libtorch C++ symbol), or whose floor is above ``oldest`` (the shims
    that raised it, or the package's target)."""
    found = []
    major, minor = (int(part) for part in oldest.split(".")[:2])
    fix = f"build with -DTORCH_TARGET_VERSION=0x{major:02x}{minor:02x}000000000000 (torch {oldest})"
    for name, file in sorted(rec["files"].items()):
        if not file["stable"]:
            symbol = file["torch_symbols"][0] if file["torch_symbols"] else "a libtorch C++ symbol"
            found.append(f"{name} is per-torch: it imports {symbol} ({file['torch_symbols_count']} such symbols)")
        elif file["shims"] and not rec.get("shim_table"):  # no versions read: every floor would pass unchecked
            found.append(f"{name}: the build environment's torch headers were not read, so its floor is unknown")
        elif file["unknown_shims"]:
            found.append(f"{name} calls {', '.join(file['unknown_shims'])}, which the build torch's headers do not "
                         "declare: its floor is unknown")  # fmt: skip
        elif file["uses_torch"] and shims.version_key(file["floor"]) > shims.version_key(oldest):
            why = f"shim {', '.join(file['floor_symbols'])}" if file["floor_symbols"] else rec["target_from"]
            found.append(
                f"{name} needs torch >= {file['floor']} ({why}), above the oldest torch in range, {oldest}"
                + ("" if file["floor_symbols"] else f": {fix}")
            )
    return found


def summary(rec: Mapping[str, Any]) -> str:
    """One line: ``stable, floor torch 2.11 (torch_from_blob)`` or ``per-torch: _C.so imports at::...``."""
    files = rec.get("files") or {}
    if not files:
        return "no compiled file"
    if rec.get("stable"):
        why = sorted({s for f in files.values() for s in f.get("floor_symbols") or []})[:3]
        return f"stable, floor torch {rec.get('floor')} ({', '.join(why) if why else rec.get('target_from')})"
    bound = [(n, f) for n, f in sorted(files.items()) if not f.get("stable")]
    name, first = bound[0]
    shown = ", ".join(first.get("torch_symbols") or [])
    more = f" and {len(bound) - 1} more file(s)" if len(bound) > 1 else ""
    return f"per-torch: {name.rsplit('/', 1)[-1]} imports {shown}{more}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m wfbuild.wheels.abi", description=__doc__.split("\n\n")[0])
    parser.add_argument("--in-dir", type=Path, required=True, help="the cell's wheels as its build wrote them")
    parser.add_argument("--cell", required=True)
    parser.add_argument("--torch-version", required=True, help="the torch the cell built against")
    parser.add_argument("--env-dir", type=Path, help="the cell's build env: its torch's shim headers")
    parser.add_argument("--out", type=Path, required=True, help="the cell's record (JSON)")
    parser.add_argument("--src", type=Path, help="the package's source: its TORCH_TARGET_VERSION, if set")
    parser.add_argument("--require-stable", metavar="OLDEST", help="refuse unless stable with a floor <= OLDEST")
    args = parser.parse_args(argv)
    wheels = sorted(args.in_dir.glob("*.whl"))
    include = shims.include_dir(args.env_dir) if args.env_dir else None
    table = shims.versions(include) if include else {}
    try:
        rec = record(args.cell, args.torch_version, wheels, table, target_of(args.torch_version, args.src, os.environ))
    except (ValueError, zipfile.BadZipFile) as exc:
        print(f"abi: cell {args.cell}: {exc}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"abi: cell {args.cell}: {summary(rec)}; shim versions from {include or 'no headers'}")
    for name, file in sorted(rec["files"].items()):
        kind = f"extension module {file['extension_module']}" if file["extension_module"] else "library"
        verdict = f"stable, floor {file['floor']}" if file["stable"] else "per-torch"
        print(f"abi: {name} ({kind}): {verdict} {file['torch_symbols'] or file['floor_symbols'] or ''}".rstrip())
    refused = refusals(rec, args.require_stable) if args.require_stable else []
    for why in refused:
        print(f"ABI REFUSED: cell {args.cell} (the request's abi: stable): {why}", file=sys.stderr)
    return 1 if refused else 0


if __name__ == "__main__":
    raise SystemExit(main())
