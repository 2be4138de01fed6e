"""A CUDA cell holds the CUDA code it claims: ``python3 -m wfbuild.cuda.devicecode`` (the cell's stage after its
build, before repair, smoke and publish).

    python3 -m wfbuild.cuda.devicecode --in-dir RAW --cell ID --cuda 13.0 --arch-list "8.0;9.0" --out RECORD.json
        [--src DIR]

Reads the device code of every compiled file of the cell's wheel(s) (wfbuild.cuda.fatbin: the ``.nv_fatbin``
sections of its ELF files, standalone fatbinaries, cubins and PTX) and writes RECORD.json: per file the
SASS architectures and the PTX targets with their PTX ISA versions (the manifest and the signed provenance
carry it). The cell is refused (exit 1, nothing of it repaired, tested or published) when no compiled file
holds device code (a CPU-only build, or a pure-Python wheel) or a requested architecture has neither SASS
nor PTX that a GPU of it runs (wfbuild.cuda.archrule; the cell's files together, so a package that builds
per-architecture libraries passes). The refusal (DeviceCodeMissing) names the cell, the files and what they
hold, and the usual causes: a switch of the package's own (``--src``: the environment variables its
setup.py or CMake files read) or an architecture list the package sets itself.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wfbuild.cuda import archrule, fatbin

VERDICT = "DEVICE CODE REFUSED: "  # wheelfoundry_user.failures shows these lines as a failure's cause
IN_MEMORY = 64 << 20  # larger members are read from a temporary file through mmap
# The variables the farm sets itself in a CUDA cell: never the package's own switch.
FARM_SET = {"FORCE_CUDA", "USE_CUDA", "TORCH_CUDA_ARCH_LIST", "CUDA_HOME", "CUDA_PATH", "CUDA_VERSION", "CUDACXX"}
ENV_READ = re.compile(
    r"""(?:environ\.get\(|getenv\(|environ\[|\$ENV\{)\s*["']?([A-Z][A-Z0-9_]{2,63})|["']([A-Z][A-Z0-9_]{2,63})["']\s+in\s+os\.environ"""
)
SWITCH_WORDS = re.compile(r"CUDA|GPU|NVCC|KERNEL|EXTENSION|BUILD|COMPILE")
OWN_ARCHS = re.compile(  # architecture flags a package's build files set themselves
    r"arch=compute_\d+[af]?,code=\[?[\w,]+\]?|"
    r"--gpu-architecture[= ](?:sm|compute)_\d+[af]?|-arch[= ](?:sm|compute)_\d+[af]?|"
    r"(?:CMAKE_)?CUDA_ARCHITECTURES\s*[ =]\s*\"?[\w;-]+|environ\[[\"']TORCH_CUDA_ARCH_LIST[\"']\]\s*=\s*[\"'][^\"']+"
)
BUILD_FILES = ("setup.py", "CMakeLists.txt", "pyproject.toml", "setup.cfg", "build.py")


class DeviceCodeMissing(RuntimeError):
    """A CUDA cell's build holds no device code, or none a requested architecture's GPU runs."""


def read_wheel(wheel: Path) -> dict[str, list[fatbin.Entry]]:
    """Each compiled member of ``wheel`` and its device code (an empty list: host code only)."""
    out: dict[str, list[fatbin.Entry]] = {}
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory(prefix="wf-devicecode-") as scratch:
        for info in archive.infolist():
            if info.is_dir() or info.file_size < 16 or not fatbin.worth_opening(info.filename):
                continue
            with archive.open(info) as member:
                head = member.read(4)
            if head not in (b"\x7fELF", fatbin.MAGIC_BYTES) and not info.filename.endswith(".ptx"):
                continue
            if info.file_size <= IN_MEMORY:
                entries = fatbin.read(archive.read(info), info.filename)
            else:
                path = Path(scratch) / "member"
                with archive.open(info) as member, path.open("wb") as handle:
                    shutil.copyfileobj(member, handle, 1 << 20)
                entries = fatbin.read_path(path)
                path.unlink()
            if entries is not None:
                out[info.filename] = entries
    return out


def file_record(entries: list[fatbin.Entry]) -> dict[str, Any]:
    return {
        "sass": sorted({e.code.name for e in entries if e.code.kind == "sass"}),
        "ptx": sorted({e.code.name for e in entries if e.code.kind == "ptx"}),
        "ptx_isa": sorted({e.isa for e in entries if e.code.kind == "ptx"}),
        "entries": len(entries),
    }


def codes_of(files: Mapping[str, Mapping[str, Any]]) -> list[archrule.Code]:
    return sorted({archrule.Code.parse(n) for rec in files.values() for n in [*rec["sass"], *rec["ptx"]]})


def describe(name: str, rec: Mapping[str, Any]) -> str:
    held = [
        f"SASS {', '.join(rec['sass'])}" if rec["sass"] else "",
        f"PTX {', '.join(rec['ptx'])}" if rec["ptx"] else "",
    ]
    return f"{name.rsplit('/', 1)[-1]}: {'; '.join(h for h in held if h) or 'host code only (no .nv_fatbin)'}"


def verdict(
    cell: str, cuda: str, arch_list: str, wheels: list[str], files: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The cell's record: what it holds, which requested arch each piece of code serves, what is missing."""
    codes = codes_of(files)
    serves = {str(w): [c.name for c in archrule.serving(w, codes)] for w in archrule.parse_arch_list(arch_list)}
    absent = [w for w, found in serves.items() if not found]
    if not wheels:
        problem = "the build wrote no wheel"
    elif not files:
        problem = "nothing was compiled: " + ", ".join(wheels) + " holds no compiled file (a pure-Python wheel)"
    elif not codes:
        problem = "no compiled file holds device code: the build compiled host code only"
    elif absent:
        problem = "no code for " + ", ".join(absent) + ": neither its SASS nor PTX the driver can JIT for it"
    else:
        problem = ""
    return {
        "cell": cell,
        "cuda": cuda,
        "arch_list": arch_list,
        "wheels": wheels,
        "files": files,
        "sass": sorted({n for rec in files.values() for n in rec["sass"]}),
        "ptx": sorted({n for rec in files.values() for n in rec["ptx"]}),
        "serves": serves,  # requested arch -> the code a GPU of it runs
        "missing": absent,
        "status": "refused" if problem else "ok",
        "problem": problem,
    }


def source_hints(src: Path | None, environ: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """(switch-like variables the build files read that this cell leaves unset, architecture flags they set)."""
    switches: list[str] = []
    archs: list[str] = []
    if src is None or not src.is_dir():
        return switches, archs
    paths = [src / name for name in BUILD_FILES] + sorted(src.glob("cmake/*.cmake"))[:20]
    for path in paths:
        try:
            if path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 20:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for match in ENV_READ.finditer(text):
            name = match[1] or match[2]
            if SWITCH_WORDS.search(name) and name not in FARM_SET and not environ.get(name) and name not in switches:
                switches.append(name)
        for match in OWN_ARCHS.finditer(text):
            flag = re.sub(r"""environ\[["']TORCH_CUDA_ARCH_LIST["']\]\s*=\s*["']""", "TORCH_CUDA_ARCH_LIST=", match[0])
            flag = flag.replace('"', "")[:60]
            if flag not in archs:
                archs.append(flag)
    return switches[:6], archs[:4]


def refusal(record: Mapping[str, Any], switches: list[str], archs: list[str]) -> str:
    """The lines a user reads: what was refused and why, what was found, the usual fix."""
    head = f"cell {record['cell']} (CUDA {record['cuda']}, arch list {record['arch_list'] or '-'}): {record['problem']}"
    head += "; nothing of this cell is repaired, tested or published"
    files = [describe(n, r) for n, r in sorted(record["files"].items())]
    found = f"examined {len(files)} compiled file(s): " + " | ".join(files) if files else ""
    if record["missing"] and record["sass"] + record["ptx"]:
        cause = "the package sets its own architectures instead of TORCH_CUDA_ARCH_LIST"
        cause += f" ({', '.join(archs)} in its build files)" if archs else ""
        cause += "; give the request an arch_list these cover, or the package's own arch setting in build_env"
    else:
        cause = "the package compiles its CUDA code only behind a switch of its own: set it in the request's build_env"
        cause += f" (its build files read {', '.join(switches)})" if switches else ""
        cause += ", e.g. FORCE_CUDA_EXTENSION=1 (torch-harmonics), TLA_BUILD_LEGACY_CUDA=1 (torch-linear-assignment)"
    lines = [head, found, f"usual cause: {cause}"]
    return "\n".join(VERDICT + line for line in lines if line)


def enforce(record: Mapping[str, Any], src: Path | None, environ: Mapping[str, str]) -> None:
    """Raise DeviceCodeMissing (the refusal's lines) unless the cell's record says it holds what was asked."""
    if record["status"] != "ok":
        raise DeviceCodeMissing(refusal(record, *source_hints(src, environ)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m wfbuild.cuda.devicecode", description=__doc__.split("\n\n")[0])
    parser.add_argument("--in-dir", type=Path, required=True, help="the cell's wheels as its build wrote them")
    parser.add_argument("--cell", required=True)
    parser.add_argument("--cuda", required=True)
    parser.add_argument("--arch-list", default="", help="the job's TORCH_CUDA_ARCH_LIST")
    parser.add_argument("--out", type=Path, required=True, help="the cell's record (JSON)")
    parser.add_argument("--src", type=Path, help="the package's source: hints at its own switch or arch flags")
    args = parser.parse_args(argv)
    wheels = sorted(args.in_dir.glob("*.whl"))
    files = {n: file_record(e) for wheel in wheels for n, e in sorted(read_wheel(wheel).items())}
    record = verdict(args.cell, args.cuda, args.arch_list, [w.name for w in wheels], files)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    for name, rec in sorted(files.items()):
        print(f"device code: {describe(name, rec)}" + (f" (PTX ISA {', '.join(rec['ptx_isa'])})" if rec["ptx"] else ""))
    try:
        enforce(record, args.src, os.environ)
    except DeviceCodeMissing as exc:
        print(f"{type(exc).__name__}:\n{exc}", file=sys.stderr, flush=True)
        return 1
    held = "; ".join(f"{want} <- {', '.join(codes)}" for want, codes in record["serves"].items())
    print(f"device code: cell {args.cell} holds code for every requested arch ({held or 'none requested'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
