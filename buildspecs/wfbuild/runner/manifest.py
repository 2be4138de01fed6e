"""manifest.json: what a job built, from what, with which tools and flags, how long it took.

``python -m wfbuild.runner.manifest --work-dir WORK --out WORK/manifest.json`` reads ``meta/job.json``
(the job contract), ``meta/stages.json`` (the runner's stage results), ``meta/commits/<package>``
(checkouts) and ``meta/sources/<package>.json`` (fetched archives), and every wheel with its
smoke result under ``dist/wheels/``. It runs inside the builder, so the toolchain versions it
records are those that built the wheels.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from wfbuild.stages.stages import cell_key
from wfbuild.wheels import reproducible, wheelfile

SCHEMA = 1
TOOLS = {  # name -> argv printing its version; the first line matching a version number is kept
    "gcc": ["gcc", "--version"],
    "cmake": ["cmake", "--version"],
    "nvcc": ["nvcc", "--version"],
    "ninja": ["ninja", "--version"],
    "sccache": ["sccache", "--version"],
    "mpicc": ["mpicc", "--showme:version"],
    "patchelf": ["patchelf", "--version"],
    "git": ["git", "--version"],
}


def _tool_version(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln.strip() for ln in (out.stdout + out.stderr).splitlines() if re.search(r"\d+\.\d+", ln)]
    # nvcc prints its release on a line of its own ("Cuda compilation tools, release 12.4, V12.4.131"),
    # the last one up to CUDA 12, followed by a "Build cuda_13.0.r13.0/..." line from CUDA 13.
    if argv[0] == "nvcc":
        lines = [ln for ln in lines if "release" in ln] or lines
    return lines[0] if lines else None


def toolchain(work: Path) -> dict[str, Any]:
    found: dict[str, Any] = {name: v for name, argv in TOOLS.items() if (v := _tool_version(argv))}
    pythons = {}
    for env in sorted((work / "envs").glob("cp*")):
        version = _tool_version([str(env / "bin" / "python"), "--version"])
        if version:
            pythons[env.name] = version
    found["python"] = pythons
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):  # not in this tools env: not recorded
        found["auditwheel"] = importlib.metadata.version("auditwheel")
    record = Path(os.environ.get("CUDA_HOME") or "/nonexistent") / "wf-toolkit.json"
    with contextlib.suppress(OSError, ValueError):  # the locked toolkit: its lock's sha256 and every part
        found["cuda_toolkit"] = {"cuda_home": str(record.parent), **json.loads(record.read_text(encoding="utf-8"))}
    return found


def _read_text(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.exists() else None


def sources(job: dict[str, Any], meta: Path, read: Callable[[Path], str | None] = _read_text) -> dict[str, Any]:
    """Each package's source: the contract's repo/ref, the checkout's commit, the fetched archive's
    record. ``read`` (None: absent) lets the runner read them as files the build may have planted."""
    out: dict[str, Any] = {}
    for pin in job.get("packages", []):
        name = pin["name"]
        entry: dict[str, Any] = {"repo": pin.get("repo"), "ref": pin.get("ref")}
        commit = read(meta / "commits" / name)
        if commit is not None:
            entry["commit"] = commit.strip()
        archive = read(meta / "sources" / f"{name}.json")
        if archive is not None:
            entry.update(json.loads(archive))
        out[name] = entry
    return out


def _cells(job: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(cpXY, torch<version> folder) -> the cell, as the job contract names it."""
    out = {}
    for cell in (job.get("extension") or {}).get("cells", []):
        cp = "cp" + cell["python"].replace(".", "")
        out[(cp, cell_key(cell))] = {
            "id": cell["id"],
            "build_id": cell["build_id"],
            "torch_version": cell["torch_version"],
            "python": cell["python"],
            "variant": job.get("variant"),
            "cuda": job.get("cuda"),
            "platform": job.get("platform"),
        }
    return out


def device_code(meta: Path, folder: str = "devicecode") -> dict[str, Any]:
    """Each CUDA cell's device code (wfbuild.cuda.devicecode's records), by cell id; ``folder="abi"``: each cell's
    ABI reading (wfbuild.wheels.abi: per compiled file stable or per-torch, its floor, the symbols that decided)."""
    out: dict[str, Any] = {}
    for path in sorted((meta / folder).glob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and isinstance(record.get("cell"), str):
            out[record["cell"]] = record
    return out


def wheels(work: Path, job: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    out = []
    cells = _cells(job or {})
    held = device_code(work / "meta")
    abi = device_code(work / "meta", "abi")
    found = [*(work / "dist" / "wheels").glob("*/cp*/*.whl"), *(work / "dist" / "wheels").glob("*/cp*/torch*/*.whl")]
    for path in sorted(found):
        info = wheelfile.info(path)
        cp_dir = path.parent if path.parent.name.startswith("cp") else path.parent.parent
        smoke_path = path.with_name(path.name + ".smoke.json")
        smoke = json.loads(smoke_path.read_text(encoding="utf-8")) if smoke_path.exists() else None
        entry = {
            "name": info.filename,
            "path": str(path.relative_to(work)),
            "package": info.project,
            "version": info.version,
            "python": f"{cp_dir.name[2]}.{cp_dir.name[3:]}",
            "tags": info.tags,
            "size": info.size,
            "sha256": info.sha256,
            "requires_python": info.requires_python,
            "requires_dist": info.requires_dist,
            "smoke": "passed" if smoke and smoke.get("passed") else ("failed" if smoke else "not run"),
        }
        if smoke and isinstance(smoke.get("cells"), dict):  # a test job's: each cell it installed and tested it in
            entry["tested_cells"] = sorted(
                c for c, r in smoke["cells"].items() if isinstance(r, dict) and r.get("passed")
            )
        if cp_dir is not path.parent:
            cell = cells.get((cp_dir.name, path.parent.name))
            entry["cell"] = cell
            record = held.get((cell or {}).get("id", ""))
            if record:  # what its CUDA cell compiled, per file (the signed provenance carries it too)
                entry["device_code"] = {k: record.get(k) for k in ("sass", "ptx", "files", "serves")}
            reading = abi.get((cell or {}).get("id", ""))
            if reading:  # what its compiled files import: stable ABI (and the torch floor) or per-torch
                entry["abi"] = {k: reading.get(k) for k in ("stable", "floor", "target", "target_from", "files")}
        out.append(entry)
    return out


def missing_cells(job: dict[str, Any], built: list[dict[str, Any]]) -> list[str]:
    """Cells of the job with no smoke-tested wheel."""
    if job.get("kind") == "test":  # a test job builds no cell; its verdict is per wheel
        return []
    done = {w["cell"]["id"] for w in built if w.get("cell") and w["smoke"] == "passed"}
    return [c["id"] for c in (job.get("extension") or {}).get("cells", []) if c["id"] not in done]


def status(job: dict[str, Any], built: list[dict[str, Any]], stages: list[dict[str, Any]]) -> str:
    """failed: no smoke-tested wheel of the job's first package; partial: some stage did not succeed."""
    first = canonicalize_name(job["packages"][0]["name"]) if job.get("packages") else None
    if not any(w["smoke"] == "passed" and w["package"] == first for w in built):
        return "failed"
    # "retried": a compile stage run again with fewer compilers after an OOM kill (wfbuild.runner.compile_memory)
    if any(s["status"] not in ("succeeded", "retried") for s in stages if s["name"] != "manifest"):
        return "partial"
    return "succeeded"


def failures(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = ("package", "python", "stage", "error", "log_tail")
    return [
        {k: s.get(k if k != "stage" else "name") for k in keys} for s in stages if s["status"] in ("failed", "aborted")
    ]


def build_manifest(work: Path) -> dict[str, Any]:
    meta = work / "meta"
    job = json.loads((meta / "job.json").read_text(encoding="utf-8"))
    stages_path = meta / "stages.json"
    stages = json.loads(stages_path.read_text(encoding="utf-8")) if stages_path.exists() else []
    built = wheels(work, job)
    return (
        {
            "schema": SCHEMA,
            "job_id": job["id"],
            "kind": job["kind"],
            "target": job.get("target"),
            "run": job.get("run", {}),
            "status": status(job, built, stages),
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "image": job.get("image"),
            "wheels": built,
            "sources": sources(job, meta),
            "toolchain": toolchain(work),
            "flags": {"job": job.get("env", {}), "packages": {p["name"]: p.get("env", {}) for p in job["packages"]}},
            "requirements": job.get("requirements", []),
            "stages": [{k: v for k, v in s.items() if k != "log_tail"} for s in stages],
            "failures": failures(stages),
            "missing_cells": missing_cells(job, built),
            "reproducibility": reproducible.record(meta, (job["packages"] or [{}])[0].get("name"), job["kind"]),
        }
        | ({"device_code": device_code(meta)} if job.get("cuda") and job["kind"] == "extension" else {})
        | ({"abi": device_code(meta, "abi")} if job["kind"] == "extension" else {})
        # a toolkit lock of the stack's (the watcher wrote it): its key and sha256, as the job's contract names it
        | ({"toolkit_lock": job["toolkit_lock"]} if job.get("toolkit_lock") else {})
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wfbuild.runner.manifest", description="Write manifest.json.")
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    manifest = build_manifest(args.work_dir)
    args.out.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"manifest: {args.out} ({manifest['status']}, {len(manifest['wheels'])} wheel(s))")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
