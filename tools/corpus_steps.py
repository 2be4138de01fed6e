"""The corpus's data and its per-package steps after the build (tools/corpus.py runs them)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS_DIR = ROOT / "examples" / "corpus"
LOADING = ("module", "pathfinder", "filefinder", "ctypes", "top-level", "libs")
TORCH = "2.13.0"  # the catalog's torch of examples/corpus/requests/*-cpu.json (checked by tests/test_corpus.py)


class CorpusError(ValueError):
    """corpus.toml or an argument is wrong (the message names the field and the value)."""


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    import_name: str
    url: str
    sha256: str
    license: str
    loading: tuple[str, ...]
    ninja: bool
    check: Path
    requires: tuple[str, ...] = ()
    ci: bool = True
    notes: str = ""
    cuda_switch: str = ""  # the package's own switch for its CUDA kernels (requests/<name>-cu130-switch.json sets it)

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[1]

    def request(self, kind: str) -> Path:
        return CORPUS_DIR / "requests" / f"{self.name}-{kind}.json"


def load_corpus(path: Path) -> list[Package]:
    """corpus.toml as Packages; CorpusError naming the package, field and value when one is wrong."""
    packages = []
    for i, raw in enumerate(tomllib.loads(path.read_text()).get("package", [])):
        where = f"{path.name}: package {raw.get('name', i)!r}"

        def need(key: str, pattern: str, raw: dict[str, Any] = raw, where: str = where) -> str:
            value = raw.get(key)
            if not isinstance(value, str) or not re.fullmatch(pattern, value):
                raise CorpusError(f"{where}: {key} = {value!r} is not {pattern!r}")
            return value

        name, version = need("name", r"[a-z0-9][a-z0-9-]*"), need("version", r"[0-9][0-9a-z.+]*")
        url = need("url", r"https://files\.pythonhosted\.org/packages/[0-9a-f/]+/[A-Za-z0-9_.-]+\.tar\.gz")
        loading = tuple(raw.get("loading") or ())
        if not loading or any(kind not in LOADING for kind in loading):
            raise CorpusError(f"{where}: loading = {list(loading)!r}; allowed: {', '.join(LOADING)}")
        check = CORPUS_DIR / need("check", r"checks/check_[a-z_]+\.py")
        package = Package(
            name=name,
            version=version,
            import_name=need("import", r"[a-z_][a-z0-9_]*"),
            url=url,
            sha256=need("sha256", r"[0-9a-f]{64}"),
            license=need("license", r"MIT|BSD-[23]-Clause|Apache-2\.0"),
            loading=loading,
            ninja=bool(raw.get("ninja")),
            check=check,
            requires=tuple(raw.get("requires") or ()),
            ci=bool(raw.get("ci", True)),
            notes=str(raw.get("notes", "")),
            cuda_switch=need("cuda_switch", r"[A-Z][A-Z0-9_]*") if "cuda_switch" in raw else "",
        )
        kinds = ("cpu", "cu130", "cu130-switch") if package.cuda_switch else ("cpu", "cu130")
        requests = [package.request(kind) for kind in kinds]
        for missing in [p for p in (check, *requests) if not p.is_file()]:
            raise CorpusError(f"{where}: {missing.relative_to(ROOT)} does not exist")
        if package.cuda_switch:
            check_switch(where, package)
        if not package.filename.startswith((f"{name.replace('-', '_')}-{version}.", f"{name}-{version}.")):
            raise CorpusError(f"{where}: url names {package.filename}, not version {version} of {name}")
        packages.append(package)
    return packages


def check_switch(where: str, package: Package) -> None:
    """The CUDA request pair of a package with a switch of its own: the same request, the switch set in one."""
    plain = json.loads(package.request("cu130").read_text())
    switched = json.loads(package.request("cu130-switch").read_text())
    env = switched.pop("build_env", {})
    if plain.get("build_env", {}).get(package.cuda_switch) or not env.get(package.cuda_switch):
        raise CorpusError(f"{where}: cuda_switch = {package.cuda_switch!r} must be set in build_env of "
                          f"{package.request('cu130-switch').name} alone")  # fmt: skip
    if {k: v for k, v in switched.items() if k != "channel"} != {k: v for k, v in plain.items() if k != "channel"}:
        raise CorpusError(
            f"{where}: {package.request('cu130-switch').name} differs from its cu130 request beyond build_env"
        )


@dataclass
class Outcome:
    name: str
    version: str
    sha256: str
    license: str
    loading: list[str]
    ninja: bool
    run_id: str = ""
    layout: str = "-"
    layout_reason: str = ""
    compile_seconds: float | None = None
    wheels: list[dict[str, Any]] = field(default_factory=list)
    wheel_bytes: int = 0
    result: str = "failed"
    stage: str = ""
    error: str = ""
    seconds: float = 0.0

    @classmethod
    def of(cls, p: Package) -> Outcome:
        return cls(p.name, p.version, p.sha256, p.license, list(p.loading), p.ninja)

    def failed(self, stage: str, error: str, started: float) -> Outcome:
        self.result, self.stage, self.error = "failed", stage, error.strip().splitlines()[0][:300] if error else "?"
        self.seconds = round(time.monotonic() - started, 1)
        return self

    def passed(self, started: float) -> Outcome:
        self.result, self.seconds = "passed", round(time.monotonic() - started, 1)
        return self

    def record_wheels(self, folder: Path, names: list[str]) -> None:
        for name in names:
            data = (folder / name).read_bytes()
            self.wheels.append({"filename": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        self.wheel_bytes = sum(w["bytes"] for w in self.wheels)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _json(s3: Any, bucket: str, key: str) -> Any:
    try:
        return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except s3.exceptions.NoSuchKey:
        return None


def layout_of(report: dict[str, Any], merge: dict[str, Any], requested: str) -> tuple[str, str]:
    """The layout the run says it used, and why; else the validated request's (default filled), marked ``?``."""
    for record in (report, merge):
        value = record.get("layout")
        if isinstance(value, str):
            return value, str(record.get("layout_reason") or "")
        if isinstance(value, dict):
            chosen = value.get("chosen") or value.get("layout") or value.get("used")
            return str(chosen), str(value.get("reason") or value.get("why") or "")
    return f"{requested}?", "the run reports no layout: this is the validated request's"


def requested_layout(request: object) -> str:
    return str(getattr(request, "layout", "?"))


def build_facts(s3: Any, bucket: str, outcome: Outcome, request: dict[str, Any]) -> None:
    """Compile seconds (the build stages in every job's manifest.json) and the layout, from what the run wrote to S3."""
    prefix = f"runs/{outcome.run_id}/"
    report = _json(s3, bucket, f"{prefix}report.json") or {}
    merge = _json(s3, bucket, f"{prefix}merge.json") or report.get("merge") or {}
    from wheelfoundry.request.request import parse_request

    outcome.layout, outcome.layout_reason = layout_of(report, merge, requested_layout(parse_request(request)))
    seconds = 0.0
    found = False
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}jobs/"):
        for item in page.get("Contents", []):
            if not item["Key"].endswith("/manifest.json"):  # the runner's manifest: every stage's own time
                continue
            for stage in (_json(s3, bucket, item["Key"]) or {}).get("stages") or []:
                if str(stage.get("name", "")).startswith("build-") and stage.get("status") == "succeeded":
                    seconds, found = seconds + float(stage.get("seconds") or 0), True
    outcome.compile_seconds = round(seconds, 1) if found else None


def user_venv(cache: Path, package: Package, venv: Path, logs: Path) -> Path:
    """A fresh venv with the catalog's torch, numpy and the package's other runtime needs (a cached
    environment it sees through a .pth file, wfbuild.envs): what the user has before `pip install`."""
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    argv = [
        sys.executable,
        "-m",
        "wfbuild.envs",
        "--python",
        python,
        "--dest",
        str(venv),
        "--torch",
        f"torch=={TORCH}",
    ]
    for requirement in ("numpy", *package.requires):
        argv += ["--pip", requirement]
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / f"{package.name}-venv.log").open("w") as handle:
        done = subprocess.run(argv, env={**os.environ, "WF_CACHE_DIR": str(cache)}, stdout=handle, stderr=handle)
    if done.returncode != 0:
        raise CorpusError(f"{package.name}: the user's environment could not be made: see {handle.name}")
    return venv


def install_and_check(
    index: str, package: Package, venv: Path, logs: Path, out: Callable[[str], None]
) -> tuple[str, str]:
    """pip install from the index, import, run the check: ('', '') or (the stage, its first error line).
    Runs in the venv's own folder, so nothing of this repository is importable but the check's helpers."""
    python = str(venv / "bin" / "python")
    steps = [
        ("install", [python, "-m", "pip", "install", "--isolated", "--index-url", index, package.name]),
        ("import", [python, "-c", f"import {package.import_name} as m; print('imported', m.__file__)"]),
        ("check", [python, str(package.check)]),
    ]
    for stage, argv in steps:
        log = logs / f"{package.name}-{stage}.log"
        out(f"{stage}: {' '.join(argv[2:] if stage != 'check' else argv[1:])}  (log {log})")
        done = subprocess.run(argv, cwd=venv, capture_output=True, text=True, check=False, timeout=900)
        log.write_text(done.stdout + done.stderr)
        for line in (done.stdout + done.stderr).splitlines():
            out(f"  {line}")
        if done.returncode != 0:
            return stage, first_error(done.stdout + done.stderr) + f" (log {log})"
    shutil.rmtree(venv, ignore_errors=True)  # passed: the next run makes a fresh one anyway
    return "", ""


def first_error(text: str) -> str:
    """The line a user needs: the exception (ImportError: ...), a FAIL line, or pip's ERROR."""
    lines = text.strip().splitlines()
    for pattern in (r"^\w+(Error|Exception): ", r"^FAIL ", r"^ERROR: "):
        hits = [line for line in lines if re.search(pattern, line)]
        if hits:
            return hits[-1] if pattern.startswith(r"^\w") else hits[0]
    return lines[-1] if lines else "exit status non-zero, no output"


def restore_compiler_cache(s3: Any, bucket: str, prefix: str, folder: Path) -> int:
    """The compiler cache an earlier corpus run on this machine saved for a package, put back under this
    run's ``prefix`` (``sccache/ext-<scope>-``: each run deploys a fresh emulated stack, whose bucket name,
    and so the source's cache scope, is new); what makes a second CI run's compiles hits."""
    files = [p for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.endswith(".partial")]
    for path in files:  # none when the folder does not exist yet
        key = prefix + path.relative_to(folder).as_posix()
        s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes(), ServerSideEncryption="aws:kms")
    return len(files)


def save_compiler_cache(s3: Any, bucket: str, prefix: str, folder: Path) -> int:
    """This run's compiler cache objects under ``prefix`` (new ones only) into ``folder``, for the next run."""
    saved = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for entry in page.get("Contents", []):
            relative = entry["Key"][len(prefix) :]
            if not relative or any(part in ("", ".", "..") for part in relative.split("/")):
                continue  # never a path outside the folder, whatever a key says
            dest = folder / relative
            if dest.is_file() and dest.stat().st_size == entry["Size"]:
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            partial = dest.with_name(dest.name + ".partial")
            partial.write_bytes(s3.get_object(Bucket=bucket, Key=entry["Key"])["Body"].read())
            partial.replace(dest)
            saved += 1
    return saved
