"""The stack's own CUDA toolkits: locks the watcher wrote, kept in the bucket as data, not as code.

The repository's locks (buildspecs/images/scripts/cuda/) ship in the build bundle and its catalog has a
``[cuda."X.Y"]`` row for each. A CUDA release that came out after the deployment (torch 2.15's 13.2) has
neither: the watcher locks it from PyPI (wheelfoundry.toolkits.toolkit_lock) and keeps, in the stack's bucket,

- each lock as ``toolkits/cuda-<X.Y>-<platform>-<sha256[:16]>.toml``: content-addressed, so a key's bytes
  never change (a new lock is a new key) and a contract naming (key, sha256) means one file;
- one record, ``toolkits/index.json``: per "<X.Y>-<platform>" the lock's key and sha256, the catalog row a
  plan needs (CudaToolkit's fields) with each fact's source, ``approved`` and when and why it was written.

Only the watcher's role may write ``toolkits/`` (template.yaml); an operator approves with their own credentials
(`wheelfoundry toolkits approve`). An entry that does not validate is ignored whole, its reason logged. Rows
are added only for CUDA versions the catalog lacks (a committed row always wins, as wheelfoundry.catalog.derived does
for releases); a lock of the bundle wins over the stack's.
Pure apart from ``logging``: the bucket is read and written by wheelfoundry.aws.toolkits.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from wheelfoundry.catalog.catalog import Catalog, CudaToolkit
from wheelfoundry.toolkits.toolkit_row import ROW_FACTS, Facts

PREFIX = "toolkits/"
INDEX_KEY = "toolkits/index.json"
FORMAT = 1
PLATFORMS = ("x86_64", "aarch64")
APPROVE = "wheelfoundry toolkits approve {cuda} --platform {platform}"
_KEY = re.compile(r"^toolkits/cuda-(\d+\.\d+)-(x86_64|aarch64)-([0-9a-f]{16})\.toml$")
_SHA = re.compile(r"^[0-9a-f]{64}$")
_CUDA = re.compile(r"^\d+\.\d+$")
_ARCH = re.compile(r"^\d+\.\d+[af]?$")
_ENV = re.compile(r"^[A-Z][A-Z0-9_]*$")

log = logging.getLogger(__name__)


class RecordInvalid(ValueError):
    """An entry of toolkits/index.json that cannot be trusted (names the field and value)."""


@dataclass(frozen=True)
class StackToolkit:
    """One lock of the stack and the catalog row it stands for."""

    key: str
    sha256: str
    row: CudaToolkit  # platforms: this lock's one
    compiler: bool  # the lock holds nvcc (CUDA 13+ wheels)
    unavailable: Mapping[str, str]  # requirement line -> why the platform has no wheel for it
    sources: Mapping[str, str]  # each fact of the row -> where it came from
    approved: bool
    written_at: str
    reason: str

    @property
    def cuda(self) -> str:
        return self.row.version

    @property
    def platform(self) -> str:
        return self.row.platforms[0]

    @property
    def name(self) -> str:
        return f"{self.cuda}-{self.platform}"

    def to_json(self) -> dict[str, Any]:
        row = {f.name: getattr(self.row, f.name) for f in dataclasses.fields(self.row)}
        row = {k: dict(v) if isinstance(v, Mapping) else list(v) if isinstance(v, tuple) else v for k, v in row.items()}
        return {
            "key": self.key,
            "sha256": self.sha256,
            "row": row,
            "compiler": self.compiler,
            "unavailable": dict(self.unavailable),
            "sources": dict(self.sources),
            "approved": self.approved,
            "written_at": self.written_at,
            "reason": self.reason,
        }


def lock_key(cuda: str, platform: str, body: bytes) -> tuple[str, str]:
    """(key, sha256) of a lock's bytes: the key holds the digest, so it is never overwritten with others."""
    digest = hashlib.sha256(body).hexdigest()
    return f"{PREFIX}cuda-{cuda}-{platform}-{digest[:16]}.toml", digest


def entry(lock: Mapping[str, Any], body: bytes, facts: Facts, approved: bool, now: str, reason: str) -> StackToolkit:
    """The record of one rendered lock (``lock``: toolkit_lock_file.document's dict, ``body``: its bytes)."""
    cuda, platform = str(lock["cuda"]), str(lock["platform"])
    key, digest = lock_key(cuda, platform, body)
    row = CudaToolkit(
        version=cuda,
        archs=tuple(facts.archs),
        default_arch_list=facts.default_arch_list,
        requirements=tuple(sorted(lock.get("requirements", {}))),
        toolkit=str(lock["release"]),
        gcc_max=facts.gcc_max,
        platforms=(platform,),
        env=dict(facts.env),
    )
    compiler = bool(lock.get("archive")) or any(w.get("part") == "compiler" for w in lock.get("wheel", []))
    sources = {
        **{k: facts.sources.get(k, "not said") for k in ROW_FACTS},
        "requirements": f"{key}: the lock's requirement lines",
        "toolkit": f"{key}: NVIDIA's release the lock resolved",
    }
    return StackToolkit(key, digest, row, compiler, dict(lock.get("unavailable", {})), sources, approved, now, reason)


def _strs(raw: Any, what: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise RecordInvalid(f"{what}: {raw!r} is not a list of strings")
    return tuple(raw)


def _str_map(raw: Any, what: str) -> dict[str, str]:
    if not isinstance(raw, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise RecordInvalid(f"{what}: {raw!r} is not a map of strings")
    return dict(raw)


def validate(name: str, raw: Any) -> StackToolkit:
    """One entry of the record, checked whole (RecordInvalid names the first field that fails)."""
    if not isinstance(raw, Mapping):
        raise RecordInvalid(f"{name}: {raw!r} is not an object")
    key, sha = raw.get("key"), raw.get("sha256")
    match = _KEY.match(key) if isinstance(key, str) else None
    if match is None:
        raise RecordInvalid(f"{name}.key: {key!r} is not toolkits/cuda-<X.Y>-<x86_64|aarch64>-<sha256[:16]>.toml")
    if not isinstance(sha, str) or not _SHA.match(sha) or sha[:16] != match[3]:
        raise RecordInvalid(f"{name}.sha256: {sha!r} is not the 64-hex digest the key {key} names")
    if name != f"{match[1]}-{match[2]}":
        raise RecordInvalid(f"{name}: the entry's name is not its key's {match[1]}-{match[2]}")
    row = raw.get("row")
    if not isinstance(row, Mapping):
        raise RecordInvalid(f"{name}.row: {row!r} is not an object")
    archs = _strs(row.get("archs"), f"{name}.row.archs")
    if not archs or not all(_ARCH.match(a) for a in archs):
        raise RecordInvalid(f"{name}.row.archs: {list(archs)!r} are not compute capabilities like 9.0")
    default = row.get("default_arch_list")
    wanted = default.replace("+PTX", "").split(";") if isinstance(default, str) else [None]
    if not all(a in archs for a in wanted):
        raise RecordInvalid(f"{name}.row.default_arch_list: {default!r} names archs not in {list(archs)}")
    gcc_max, toolkit = row.get("gcc_max"), row.get("toolkit")
    if not isinstance(gcc_max, int) or isinstance(gcc_max, bool) or not 0 < gcc_max < 100:
        raise RecordInvalid(f"{name}.row.gcc_max: {gcc_max!r} is not a GCC major version")
    if row.get("version") != match[1] or not isinstance(toolkit, str) or not toolkit.startswith(f"{match[1]}."):
        raise RecordInvalid(f"{name}.row: version {row.get('version')!r} / toolkit {toolkit!r} are not CUDA {match[1]}")
    if _strs(row.get("platforms"), f"{name}.row.platforms") != (match[2],):
        raise RecordInvalid(f"{name}.row.platforms: {row.get('platforms')!r} is not [{match[2]!r}]")
    env = _str_map(row.get("env", {}), f"{name}.row.env")
    if not all(_ENV.match(k) for k in env):
        raise RecordInvalid(f"{name}.row.env: {sorted(env)!r} are not environment variable names")
    for flag in ("approved", "compiler"):
        if not isinstance(raw.get(flag), bool):
            raise RecordInvalid(f"{name}.{flag}: {raw.get(flag)!r} is not true or false")
    parsed = CudaToolkit(
        version=match[1],
        archs=archs,
        default_arch_list=str(default),
        requirements=_strs(row.get("requirements", []), f"{name}.row.requirements"),
        toolkit=toolkit,
        gcc_max=gcc_max,
        platforms=(match[2],),
        env=env,
    )
    return StackToolkit(
        key=str(key),
        sha256=sha,
        row=parsed,
        compiler=bool(raw["compiler"]),
        unavailable=_str_map(raw.get("unavailable", {}), f"{name}.unavailable"),
        sources=_str_map(raw.get("sources", {}), f"{name}.sources"),
        approved=bool(raw["approved"]),
        written_at=str(raw.get("written_at", "")),
        reason=str(raw.get("reason", "")),
    )


def parse(body: bytes) -> tuple[dict[str, StackToolkit], list[str]]:
    """The record's valid entries and why each other one is ignored (also logged)."""
    try:
        raw = json.loads(body)
        entries = raw["toolkits"] if isinstance(raw, dict) and raw.get("format") == FORMAT else None
    except (ValueError, KeyError):
        entries = None
    if not isinstance(entries, dict):
        why = f"{INDEX_KEY}: not a format {FORMAT} record of toolkits: ignored"
        log.warning(why)
        return {}, [why]
    found, problems = {}, []
    for name, value in entries.items():
        try:
            found[str(name)] = validate(str(name), value)
        except RecordInvalid as exc:
            problems.append(f"{INDEX_KEY}: ignored: {exc}")
            log.warning("stack toolkit ignored: %s", exc)
    return found, problems


def body(record: Mapping[str, StackToolkit]) -> bytes:
    entries = {name: record[name].to_json() for name in sorted(record)}
    return json.dumps({"format": FORMAT, "toolkits": entries}, indent=2, sort_keys=True).encode()


def merge(record: Mapping[str, StackToolkit], new: Iterable[StackToolkit]) -> dict[str, StackToolkit]:
    """``record`` with ``new`` entries; one of the same name is replaced (the watcher writes none over an
    entry it has: it locks only what neither the bundle nor the record holds)."""
    return {**record, **{e.name: e for e in new}}


def added(record: Mapping[str, StackToolkit], new: Iterable[StackToolkit]) -> dict[str, StackToolkit] | None:
    """``record`` with those of ``new`` it does not hold yet (None: it holds them all). A writer that read the
    record before another wrote it never replaces that writer's entry: an approval stays an approval."""
    fresh = [e for e in new if e.name not in record]
    return merge(record, fresh) if fresh else None


def approve(record: Mapping[str, StackToolkit], cuda: str, platforms: Iterable[str], now: str) -> list[StackToolkit]:
    """The entries of ``cuda`` on ``platforms`` (each, or every platform it has) approved; [] where none is."""
    wanted = set(platforms)
    return [
        dataclasses.replace(e, approved=True, reason=f"{e.reason}; approved {now}")
        for e in record.values()
        if e.cuda == cuda and (not wanted or e.platform in wanted) and not e.approved
    ]


def approved(record: Mapping[str, StackToolkit]) -> dict[str, StackToolkit]:
    return {name: e for name, e in record.items() if e.approved}


def with_stack_toolkits(catalog: Catalog, record: Mapping[str, StackToolkit]) -> Catalog:
    """The catalog plus a ``[cuda]`` row for each approved CUDA version it lacks (a committed row always wins);
    the row's platforms are the approved locks' (x86_64's facts where both platforms have one)."""
    rows: dict[str, CudaToolkit] = {}
    for e in sorted(approved(record).values(), key=lambda e: PLATFORMS.index(e.platform)):
        if e.cuda in catalog.cuda:
            continue
        have = rows.get(e.cuda)
        platforms = (*have.platforms, e.platform) if have else (e.platform,)
        rows[e.cuda] = dataclasses.replace(have or e.row, platforms=platforms)
    if not rows:
        return catalog
    return dataclasses.replace(catalog, cuda={**catalog.cuda, **rows})


def locks_view(bundle: Mapping[str, bool] | None, record: Mapping[str, StackToolkit]) -> dict[str, bool] | None:
    """The watcher's "<X.Y>-<platform>" -> has a compiler: the bundle's locks and the approved stack locks
    (the bundle's win); None where the bundle does not say (wheelfoundry.watch.watch_facts.locks_of)."""
    if bundle is None:
        return None
    return {**{n: e.compiler for n, e in approved(record).items()}, **bundle}


def with_stack_pins(pins: Mapping[str, Any] | None, record: Mapping[str, StackToolkit]) -> Mapping[str, Any] | None:
    """bundles/current.json's ``pins`` with the approved stack locks in ``cuda``
    (wheelfoundry.request.pins.cuda_issues)."""
    if not pins or not isinstance(pins.get("cuda"), Mapping):
        return pins
    extra = {
        n: {"compiler": e.compiler, "requirements": list(e.row.requirements), "unavailable": dict(e.unavailable)}
        for n, e in approved(record).items()
    }
    return {**pins, "cuda": {**extra, **pins["cuda"]}}


def contract_lock(
    record: Mapping[str, StackToolkit], bundle_locks: Mapping[str, Any] | None, cuda: str, platform: str
) -> dict[str, str] | None:
    """What a CUDA job's contract names when its lock is the stack's: ``{"key", "sha256"}`` (None: the bundle's)."""
    name = f"{cuda}-{platform}"
    found = approved(record).get(name)
    if found is None or (bundle_locks is not None and name in bundle_locks):
        return None
    return {"key": found.key, "sha256": found.sha256}


def waiting(record: Mapping[str, StackToolkit]) -> dict[str, str]:
    """ "<X.Y>-<platform>" -> why its cells wait: a lock written while ToolkitApproval is manual."""
    return {
        n: f"CUDA {e.cuda}: the watcher's {e.platform} lock {e.key} (sha256 {e.sha256}) is not approved; "
        f"awaiting approval: {APPROVE.format(cuda=e.cuda, platform=e.platform)}"
        for n, e in record.items()
        if not e.approved
    }


def wanted(request: Any, catalog: Catalog) -> bool:
    """Whether ``request`` is an extension request naming a CUDA version the catalog lacks (only then is the
    record read: any other request is judged without S3)."""
    if not isinstance(request, Mapping) or request.get("framework") != "extension":
        return False
    cudas = request.get("cuda")
    return isinstance(cudas, list) and any(
        isinstance(c, str) and _CUDA.match(c) and c not in catalog.cuda for c in cudas
    )
