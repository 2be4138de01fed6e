"""A test job's own steps: fetch the staged wheels, then the verdict over every cell they serve.

``python -m wfbuild.stages.published fetch --s3 s3://BUCKET/PREFIX --work-dir WORK``
    reads ``PREFIX/staged.json`` (written by Merge: each wheel the run will publish, its sha256 and the
    cells it claims to serve), downloads every wheel from ``PREFIX/staged/``, checks its bytes, and lays
    it out twice: ``dist/wheels/<project>/cpXY/<wheel>`` (what the manifest lists and the runner uploads)
    and ``published/<cell>/<wheel>`` (one folder per cell, which that cell's smoke stage installs from).
``python -m wfbuild.stages.published verdict --work-dir WORK``
    a wheel passed only if the smoke test passed in EVERY cell it serves; writes its
    ``<wheel>.smoke.json`` (what the manifest reads) and prints one line per failure, naming the wheel,
    the cell and the first error; exit 1 if any wheel failed.

Between the two, each cell's smoke stage (wfbuild.stages.smoke, the build's own) installs the wheel with pip
from the file, dependencies resolved as pip would, over that cell's torch, and imports it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name, parse_wheel_filename

from wfbuild import safety
from wfbuild.wheels import wheelfile

WHEEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+!-]{0,200}\.whl")


def _cp(wheel: str) -> str:
    for tag in parse_wheel_filename(wheel)[3]:
        if tag.interpreter.startswith("cp") and tag.interpreter[2:].isdigit():
            return tag.interpreter
    raise ValueError(f"{wheel}: no CPython tag")


def _project(wheel: str) -> str:
    return str(canonicalize_name(parse_wheel_filename(wheel)[0]))


def fetch(s3: Any, url: str, work: Path) -> list[dict[str, Any]]:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    prefix = prefix.rstrip("/") + "/"
    staged = json.loads(s3.get_object(Bucket=bucket, Key=f"{prefix}staged.json")["Body"].read())
    for entry in staged:
        name = str(entry.get("filename", ""))
        if not WHEEL_NAME.fullmatch(name) or entry.get("key") != f"{prefix}staged/{name}":
            raise ValueError(f"staged.json names {name!r} at {entry.get('key')!r}: not a wheel of this job's prefix")
        cells = [str(c) for c in entry.get("cells") or []]
        if not cells or not all(safety.CELL.fullmatch(c) for c in cells):
            raise ValueError(f"{name}: staged.json names no valid cell it serves ({cells!r})")
        dest = work / "dist" / "wheels" / _project(name) / _cp(name) / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, entry["key"], str(dest))
        if wheelfile.sha256_of(dest) != entry.get("sha256"):
            raise ValueError(f"{name}: its bytes are not the ones Merge staged (sha256 {entry.get('sha256')})")
        for cell in cells:
            folder = work / "published" / cell
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(dest, folder / name)
        print(f"staged {name} ({entry.get('sha256')}): serves {', '.join(cells)}", flush=True)
    (work / "meta").mkdir(parents=True, exist_ok=True)
    (work / "meta" / "staged.json").write_text(json.dumps(staged, indent=1), encoding="utf-8")
    return list(staged)


def _result(work: Path, cell: str, name: str) -> dict[str, Any]:
    path = work / "published" / cell / f"{name}.smoke.json"
    try:
        found: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"passed": False, "check": "install", "error": "the cell's test did not run (its environment failed)"}
    return found


def verdict(work: Path) -> int:
    staged = json.loads((work / "meta" / "staged.json").read_text(encoding="utf-8"))
    failed = 0
    for entry in staged:
        name = entry["filename"]
        cells = {cell: _result(work, cell, name) for cell in entry["cells"]}
        bad = {c: r for c, r in cells.items() if not r.get("passed")}
        for cell, result in bad.items():
            print(
                f"PUBLISHED WHEEL FAILED: {name} in cell {cell}: check '{result.get('check')}': {result.get('error')}",
                file=sys.stderr,
                flush=True,
            )
        target = work / "dist" / "wheels" / _project(name) / _cp(name) / f"{name}.smoke.json"
        record = {"wheel": name, "passed": not bad, "cells": cells}
        if bad:
            first = next(iter(bad))
            record |= {"check": f"{first}: {bad[first].get('check')}", "error": bad[first].get("error")}
        target.write_text(json.dumps(record, indent=1), encoding="utf-8")
        print(f"{'passed' if not bad else 'FAILED'}: {name} in {len(cells) - len(bad)}/{len(cells)} cell(s)")
        failed += bool(bad)
    return 1 if failed else 0


CELL_MODULES = {"envs": "wfbuild.envs", "smoke": "wfbuild.stages.smoke"}  # what `cell --tool` runs


def in_cell(work: Path, cell: str, tool: str, argv: list[str]) -> int:
    """wfbuild.envs or .smoke for a cell, if a staged wheel serves it (a cell that did not build has none)."""
    if not (work / "published" / cell).is_dir():
        print(f"cell {cell}: no staged wheel serves it (it did not build); nothing to test", flush=True)
        return 0
    module = importlib.import_module(CELL_MODULES[tool])
    return int(module.main(argv))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wfbuild.stages.published", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cell = sub.add_parser("cell", help="wfbuild.envs or wfbuild.stages.smoke for one cell (ARGS after --)")
    cell.add_argument("--work-dir", type=Path, required=True)
    cell.add_argument("--cell", required=True)
    cell.add_argument("--tool", choices=sorted(CELL_MODULES), required=True)
    cell.add_argument("args", nargs=argparse.REMAINDER)
    get = sub.add_parser("fetch")
    get.add_argument("--s3", required=True, help="s3://BUCKET/PREFIX: the test job's prefix")
    get.add_argument("--work-dir", type=Path, required=True)
    judge = sub.add_parser("verdict")
    judge.add_argument("--work-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "cell":
        rest = args.args[1:] if args.args[:1] == ["--"] else args.args
        return in_cell(args.work_dir, safety.check(safety.CELL, args.cell, "cell"), args.tool, rest)
    if args.command == "verdict":
        return verdict(args.work_dir)
    import boto3  # the fetch stage runs on the host with the job's session; verdict needs no AWS

    safety.check(safety.S3_PREFIX, args.s3, "staged prefix")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    fetch(boto3.client("s3", region_name=region), args.s3, args.work_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
