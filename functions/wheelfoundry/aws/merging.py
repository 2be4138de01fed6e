"""Merge: after every build job of an extension run, stage what the run will publish.

Runs on Lambda after the Map (docs/contracts.md §6). The layout is decided here from the cell wheels
themselves (:func:`choose_layout`): ``merged`` gives one wheel per (Python, platform) holding every
build; ``per-cell`` stages the cell wheels as they are. Nothing is published here: each wheel goes to
the prefix of the test job that serves its cells (``<test prefix>staged/``, listed in ``staged.json``),
and only a wheel that passed there reaches the channel (wheelfoundry.planning.testjobs).
The builds are untrusted: cells come from job.json (written by Validate), each wheel is read from
its job's own prefix and its bytes must hash to what the job's manifest says. A cell with no
smoke-tested wheel is *missing*: the run goes out without it and names it, unless the request set
``require_all_cells``, in which case nothing of that run is staged or published.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from wheelfoundry.aws.results import safe_wheel_name
from wheelfoundry.aws.retest_stage import retest_stagings
from wheelfoundry.publishing.merge import MODULE, Build, MergeConflict, merge, path_loaded, plain_modules
from wheelfoundry.request.stable_wheels import python_free, serves_python

STABLE = (
    "abi stable: one wheel per CUDA major and Python serves every torch and variant of the major in the range, "
    "installed and tested in each (Requires-Dist torch>= the oldest it serves)"
)
RETEST = "retest: the channel's published stable-ABI wheel, as published, tested on the new torch's cells (no build)"


def _json(s3: Any, bucket: str, key: str) -> Any:
    try:
        return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except (ClientError, ValueError):
        return None


def built_cells(s3: Any, bucket: str, job: dict[str, Any]) -> tuple[list[tuple[dict[str, Any], str]], list[str]]:
    """([(cell, wheel key)], missing cell ids) of one job."""
    prefix = job["prefix"]
    contract = _json(s3, bucket, f"{prefix}job.json") or {}
    ext = contract.get("extension") or {}
    cells = {c["id"]: c for c in ext.get("cells", [])}
    serves = ext.get("serves") or []  # abi "stable": each built wheel serves its Python's cells of the range
    result = _json(s3, bucket, f"{prefix}result.json") or {}
    manifest = _json(s3, bucket, f"{prefix}manifest.json") if result.get("status") in ("succeeded", "partial") else None
    found: dict[str, tuple[dict[str, Any], str]] = {}
    lost: list[str] = []  # cells of other Pythons a python_free build was to serve, its wheel tied to its own
    for wheel in (manifest or {}).get("wheels", []):
        cell_id = str((wheel.get("cell") or {}).get("id"))
        if wheel.get("smoke") != "passed" or cell_id not in cells:
            continue
        name = safe_wheel_name(job["id"], wheel.get("name"))
        # one build for every Python (python_free) only if its wheel is abi3 / py3-none; else its own Python's
        free = bool(ext.get("python_free")) and python_free(name)
        own = cells[cell_id]["python"]
        served = [c for c in serves if c.get("python") == own or (free and serves_python(name, str(c.get("python"))))]
        lost += [str(c["id"]) for c in serves if c not in served and ext.get("python_free")]
        found[cell_id] = (
            {
                **cells[cell_id],
                "sha256": wheel.get("sha256"),
                **_where(contract),
                **({"serves": served} if served else {}),
            },
            f"{prefix}wheels/{name}",
        )
    return list(found.values()), [c for c in cells if c not in found] + sorted(set(lost))


def variant_of(cell: dict[str, Any]) -> str:
    """``torch-2.13.0+cpu``, ``torch-2.11.0+cu130``: the (torch, CUDA) pair a wheel serves, as PyG's index names it."""
    cuda = cell.get("cuda")
    return f"torch-{cell['torch_version']}+{'cu' + str(cuda).replace('.', '') if cuda else 'cpu'}"


def _variants(cells: list[dict[str, Any]]) -> list[str]:
    return sorted({variant_of(c) for c in cells}, key=lambda v: (Version(v[6:].split("+")[0]), v))


def _where(contract: dict[str, Any]) -> dict[str, Any]:
    name = (contract.get("extension") or {}).get("name", "")
    return {"platform": contract.get("platform"), "cuda": contract.get("cuda"), "project": name}


def _test_jobs(s3: Any, bucket: str, tests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """cell id -> the test job (its Map summary) that serves it, from the contracts Validate wrote."""
    out = {}
    for test in tests:
        contract = _json(s3, bucket, f"{test['prefix']}job.json") or {}
        for cell in (contract.get("extension") or {}).get("cells", []):
            out[cell["id"]] = test
    return out


def choose_layout(asked: str, files: list[str], plain: frozenset[str] = frozenset()) -> tuple[str, str]:
    """(layout, why) from the request's layout and every file of the cell wheels (``plain``: those of their
    ``<name>.so`` files that define ``PyInit_<name>``, wheelfoundry.publishing.merge.plain_modules)."""
    by_path = path_loaded(files, plain)
    if asked == "per-cell":
        return "per-cell", "the request asked for per-cell wheels"
    if by_path:
        why = f"{by_path[0]} is a shared library the package loads by path, not a Python extension module (it"
        why += " defines no PyInit_ for its name)" if by_path[0].endswith(".so") else " has no .so suffix)"
        if asked == "merged":
            raise MergeConflict(f"layout 'merged' cannot serve this package: {why}; use layout 'auto' or 'per-cell'")
        return "per-cell", f"{why}: one merged wheel cannot hold every build of it"
    why = "every compiled file is a Python extension module (a loader stub picks the build) or a grafted library"
    return "merged", why if asked == "auto" else f"the request asked for merged wheels; {why}"


def _files(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as zf:
        return [i.filename for i in zf.infolist() if not i.is_dir()]


def _unsuffixed(path: Path) -> dict[str, bytes]:
    """The wheel's ``*.so`` files with no ABI suffix, read: only their symbols say whether Python imports them."""
    with zipfile.ZipFile(path) as zf:
        names = [n for n in zf.namelist() if n.endswith(".so") and not MODULE.match(n)]
        return {n: zf.read(n) for n in names}


def stage_run(
    event: dict[str, Any],
    s3: Any,
    work: Path | None = None,
    layout: tuple[str, str] | None = None,
    note: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write what the run will publish into its test jobs' prefixes; publish nothing (the test jobs do).

    ``layout``: (layout, why) decided already (wheelfoundry.aws.fallback); ``note``: more for merge.json.
    """
    run = event["run"]
    bucket = run["bucket"]
    serving = _test_jobs(s3, bucket, event.get("test_jobs") or [])
    cells: list[tuple[dict[str, Any], str]] = []
    missing: list[str] = []
    for job in event.get("jobs") or []:
        found, lost = built_cells(s3, bucket, job)
        cells += found
        missing += lost
    out: dict[str, Any] = {"status": "succeeded", "error": None, "layout": None, "layout_reason": "", "wheels": []}
    out["test_jobs"] = []
    out["missing_cells"] = sorted(missing)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        try:
            if missing and run.get("require_all_cells"):
                raise MergeConflict(
                    f"require_all_cells: {len(missing)} cell(s) did not build: {', '.join(sorted(missing))}"
                )
            if run.get("retest"):  # no builds: the channel's published stable wheels, for the new torch's cells
                out["layout"], out["layout_reason"] = "per-cell", RETEST
                for test, path, digest, mine in retest_stagings(s3, run, Path(tmp), event.get("test_jobs") or []):
                    fields = {"cells": [c["id"] for c in mine], "builds": [], "variants": _variants(mine)}
                    _stage(s3, bucket, test, path, digest, out, retest=str(path.name), **fields)
            else:
                _stage_built(s3, run, Path(tmp), cells, serving, out, layout)
        except MergeConflict as exc:
            out.update(status="failed", error=str(exc), wheels=[])
    if out["status"] == "succeeded" and missing:
        out["status"] = "partial"
    staged = {w["test_job"] for w in out["wheels"]}
    for test in event.get("test_jobs") or []:
        if test["id"] in staged:
            mine = [w for w in out["wheels"] if w["test_job"] == test["id"]]
            s3.put_object(Bucket=bucket, Key=f"{test['prefix']}staged.json", Body=json.dumps(mine, indent=1).encode())
            out["test_jobs"].append(test)
    record = {**out, **(note or {})}
    s3.put_object(Bucket=bucket, Key=f"runs/{run['id']}/merge.json", Body=json.dumps(record, indent=2).encode())
    return out


def _stage_built(
    s3: Any,
    run: dict[str, Any],
    tmp: Path,
    cells: list[tuple[dict[str, Any], str]],
    serving: dict[str, dict[str, Any]],
    out: dict[str, Any],
    layout: tuple[str, str] | None,
) -> None:
    """The build jobs' cell wheels, merged or as they are, by the layout their files call for."""
    bucket = run["bucket"]
    local = _download(s3, bucket, tmp, cells)
    files = [f for path in local.values() for f in _files(path)]
    plain = plain_modules([_unsuffixed(path) for path in local.values()])
    asked = str(run.get("layout") or "auto")
    out["layout"], out["layout_reason"] = layout or choose_layout(asked, files, plain)
    if any(cell.get("serves") for cell, _ in cells):
        out["layout"], out["layout_reason"] = "per-cell", STABLE
    if out["layout"] == "merged":
        _stage_merged(s3, bucket, tmp, cells, local, serving, out)
    else:
        _stage_cells(s3, bucket, cells, local, serving, out)


def _download(s3: Any, bucket: str, tmp: Path, cells: list[tuple[dict[str, Any], str]]) -> dict[str, Path]:
    """Each cell wheel, its bytes checked against its job's manifest."""
    local = {}
    for cell, key in cells:
        path = tmp / "cells" / cell["id"] / key.rsplit("/", 1)[1]
        path.parent.mkdir(parents=True)
        s3.download_file(bucket, key, str(path))
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != cell["sha256"]:
            raise MergeConflict(f"{key}: its bytes hash to {digest}, the manifest says {cell['sha256']}")
        if canonicalize_name(parse_wheel_filename(path.name)[0]) != canonicalize_name(cell["project"]):
            raise MergeConflict(f"{key} is not a wheel of {cell['project']}")
        local[cell["id"]] = path
    return local


def _stage(
    s3: Any, bucket: str, test: dict[str, Any] | None, path: Path, sha256: str, out: dict[str, Any], **fields: Any
) -> None:
    """One wheel to publish, into the prefix of the test job that serves its cells, and into merge.json."""
    if test is None:
        raise MergeConflict(f"{path.name}: no test job serves its cells {fields.get('cells')}")
    key = f"{test['prefix']}staged/{path.name}"
    s3.upload_file(str(path), bucket, key, ExtraArgs={"Metadata": {"sha256": sha256}, "ContentType": "application/zip"})
    entry = {"filename": path.name, "key": key, "sha256": sha256, "size": path.stat().st_size, "test_job": test["id"]}
    out["wheels"].append({**entry, **fields})


def _stage_cells(
    s3: Any,
    bucket: str,
    cells: list[tuple[dict[str, Any], str]],
    local: dict[str, Path],
    serving: dict[str, dict[str, Any]],
    out: dict[str, Any],
) -> None:
    # An abi3 or py3-none wheel has one name whatever Python built it: the oldest Python's build is staged once
    # for the cells of every Python, each tested in its own test job; the others' bytes are not published.
    chosen: dict[str, tuple[dict[str, Any], list[dict[str, Any]], list[str]]] = {}
    for cell, _ in sorted(cells, key=lambda c: (Version(str(c[0].get("python", "0"))), c[0]["id"])):
        served = cell.get("serves") or [cell]  # abi "stable": the range's cells of its Python, each tested
        name = local[cell["id"]].name
        if name in chosen:
            chosen[name][1].extend(served)
            chosen[name][2].append(cell["build_id"])
        else:
            chosen[name] = (cell, list(served), [])
    for _, (cell, served, same_name) in sorted(chosen.items()):
        by_test: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for c in served:
            by_test[str((serving.get(c["id"]) or {}).get("id"))].append(c)
        for _, mine in sorted(by_test.items()):
            fields = {"cells": [c["id"] for c in mine], "builds": [cell["build_id"]], "variants": _variants(mine)}
            fields |= {"same_name_builds": same_name} if same_name else {}
            _stage(s3, bucket, serving.get(mine[0]["id"]), local[cell["id"]], cell["sha256"], out, **fields)


def _stage_merged(
    s3: Any,
    bucket: str,
    tmp: Path,
    cells: list[tuple[dict[str, Any], str]],
    local: dict[str, Path],
    serving: dict[str, dict[str, Any]],
    out: dict[str, Any],
) -> None:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for cell, _ in cells:
        groups[(cell["python"], cell["platform"])].append(cell)
    for (python, platform), members in sorted(groups.items()):
        members.sort(key=lambda c: (c["torch_version"], c.get("cuda") or ""))
        builds = [Build(c["build_id"], c["torch_version"], c.get("cuda"), local[c["id"]]) for c in members]
        merged = merge(builds, tmp / "merged" / f"{python}-{platform}")
        _stage(
            s3,
            bucket,
            serving.get(members[0]["id"]),
            merged.path,
            merged.sha256,
            out,
            cells_size=merged.inputs_size,
            cells=[c["id"] for c in members],
            builds=list(merged.builds),
            requires_torch=merged.requires_torch,
            variants=sorted({variant_of(c) for c in members}),
        )
