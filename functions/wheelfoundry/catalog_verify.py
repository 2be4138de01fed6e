"""``wheelfoundry catalog verify``: the catalog and the rendered builds against upstream's files.

Upstream facts come from a checkout (or a folder with the few upstream files, laid out as in their
repositories; see upstream.CANDIDATES) or from a facts TOML written by ``catalog extract`` from such
files, with each fact's provenance. Every difference is printed; one the catalog does not explain
in its ``[explained]`` table makes the command exit 1.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from wheelfoundry import upstream
from wheelfoundry.catalog import Catalog, Release
from wheelfoundry.config import load_config
from wheelfoundry.errors import RequestInvalid
from wheelfoundry.planning import plan_request
from wheelfoundry.request import parse_request

FACTS_FILE = "upstream-facts.toml"
# Set by upstream's script from the image or for its own packaging (the repair stage writes RPATHs
# and bundles libraries here): never compared.
INFORMATIONAL = frozenset(
    [
        "CUDA_VERSION",
        "CUDA_VERSION_SHORT",
        "CUDNN_VERSION",
        "DESIRED_CUDA",
        "SCRIPTPATH",
        "BUILD_SCRIPT",
        "CMAKE_ARGS",
        "EXTRA_CAFFE2_CMAKE_FLAGS",
        "DEPS_LIST",
        "DEPS_SONAME",
        "LIBGOMP_PATH",
        "OS_NAME",
        "WHEELHOUSE_DIR",
        "LIBTORCH_HOUSE_DIR",
        "PYTORCH_FINAL_PACKAGE_DIR",
        "CUDA_RPATHS",
        "C_SO_RPATH",
        "LIB_SO_RPATH",
        "FORCE_RPATH",
        "TORCH_CUDA_ARCH_LIST",
        "PYTORCH_EXTRA_INSTALL_REQUIREMENTS",
        "TRITON_VERSION",
        "TRITON_REQUIREMENT",
        "TRITON_CONSTRAINT",
        "USE_MAGMA",
    ]
)


@dataclass
class UpstreamFacts:
    release: str
    python: tuple[str, ...] | None = None
    cuda: tuple[str, ...] | None = None
    arch_lists: dict[str, str] = field(default_factory=dict)
    requirements: dict[str, tuple[str, ...]] = field(default_factory=dict)
    env: dict[str, dict[str, str]] = field(default_factory=dict)
    nvcc_flags_seen: str | None = None
    manylinux: str | None = None
    acl: str | None = None
    openblas: str | None = None
    provenance: dict[str, str] = field(default_factory=dict)

    def merge(self, other: UpstreamFacts) -> None:
        for name in ("python", "cuda", "nvcc_flags_seen", "manylinux", "acl", "openblas"):
            if getattr(self, name) is None:
                setattr(self, name, getattr(other, name))
        for name in ("arch_lists", "requirements", "env", "provenance"):
            for key, value in getattr(other, name).items():
                getattr(self, name).setdefault(key, value)


def read_files(root: Path, release: Release, provenance: dict[str, str]) -> UpstreamFacts:
    """Facts from upstream files under ``root`` (checkout layout), for the CUDA versions of ``release``."""
    files = upstream.UpstreamFiles.scan(root)
    facts = UpstreamFacts(release.torch)
    cite = {kind: provenance.get(kind, str(path)) for kind, path in files.found.items()}
    if (text := files.text("build_cuda")) is not None:
        for cuda in release.all_cuda:
            exports = upstream.cuda_exports(text, cuda)
            if exports.get("TORCH_CUDA_ARCH_LIST"):
                facts.arch_lists[cuda] = exports["TORCH_CUDA_ARCH_LIST"]
                facts.env[cuda] = {k: v for k, v in exports.items() if k not in INFORMATIONAL}
        facts.provenance.update(arch_list=cite["build_cuda"], env=cite["build_cuda"])
    if (text := files.text("matrix")) is not None:
        matrix = upstream.read_matrix(text)
        facts.python = tuple(p for p in matrix.python if not p.endswith("t")) or None
        facts.cuda = matrix.cuda or None
        facts.requirements.update(matrix.requirements)
        facts.provenance.update(python=cite["matrix"], cuda=cite["matrix"])
        if matrix.requirements:
            facts.provenance["requirements"] = cite["matrix"]
    wheel_cuda: str | None = None
    if (text := files.text("metadata")) is not None:
        wheel_cuda = provenance.get("metadata_cuda") or upstream.metadata_cuda(text)
        if wheel_cuda:
            facts.requirements[wheel_cuda] = upstream.metadata_requirements(text)
            facts.provenance["requirements"] = cite["metadata"]
    if (text := files.text("wheel")) is not None:
        facts.manylinux = upstream.wheel_manylinux(text)
        facts.provenance["manylinux"] = cite["wheel"]
    if (text := files.text("build_strings")) is not None:
        arch = upstream.gencode_arch_list(text)
        if wheel_cuda and arch:
            facts.arch_lists[wheel_cuda] = arch
            facts.provenance["arch_list"] = cite["build_strings"]
        facts.nvcc_flags_seen = text
        facts.provenance["env"] = cite["build_strings"]
    if (text := files.text("aarch64")) is not None:
        facts.acl = upstream.acl_version(text)
        facts.openblas = upstream.openblas_version(text)
        facts.provenance["aarch64"] = cite["aarch64"]
    if (text := files.text("openblas")) is not None and facts.openblas is None:
        facts.openblas = upstream.openblas_version(text)
        facts.provenance["aarch64"] = cite["openblas"]
    return facts


def read_facts_toml(path: Path) -> UpstreamFacts:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    raw: dict[str, Any] = data.get("facts", {})
    return UpstreamFacts(
        release=str(data["release"]),
        python=tuple(raw["python"]) if "python" in raw else None,
        cuda=tuple(raw["cuda"]) if "cuda" in raw else None,
        arch_lists=dict(raw.get("arch_lists", {})),
        requirements={k: tuple(v) for k, v in raw.get("requirements", {}).items()},
        env={k: dict(v) for k, v in raw.get("env", {}).items()},
        nvcc_flags_seen=raw.get("nvcc_flags_seen"),
        manylinux=raw.get("manylinux"),
        acl=raw.get("acl"),
        openblas=raw.get("openblas"),
        provenance=dict(data.get("provenance", {})),
    )


RELEASE_FACTS = ("python", "cuda", "cxx11_abi", "manylinux", "arch_list", "requirements", "env", "aarch64")


def source_problems(catalog: Catalog) -> list[str]:
    """Facts without a source, or with one naming no ref of the catalog ("unverified: why" is allowed)."""
    problems = []
    for release in catalog.releases:
        if not release.source:
            problems.append(f"{release.torch}: pairing has no source")
        for fact in RELEASE_FACTS:
            source = release.sources.get(fact, "")
            if source.startswith("unverified: ") and len(source) > len("unverified: ") + 10:
                continue
            refs = [part.split(":", 1)[0].strip() for part in source.split(";")]
            if not source or not any(ref in catalog.refs for ref in refs):
                problems.append(f"{release.torch}: {fact} has no usable source ({source!r})")
    return problems


Status = Literal["same", "explained", "DIFFERS"]


@dataclass(frozen=True)
class Finding:
    fact: str
    status: Status
    catalog: str
    upstream: str
    source: str
    note: str = ""


def _rendered(catalog: Catalog, release: Release, platform: str, cuda: str | None) -> dict[str, Any] | None:
    target: dict[str, Any] = {"platform": platform, "accelerator": "cuda" if cuda else "cpu"}
    if cuda:
        target["cuda"] = cuda
    raw = {
        "version": release.latest_patch(),
        "python": [release.python[-1]],
        "targets": [target],
        "packages": ["torch"],
    }
    config = load_config()
    try:
        (job,) = plan_request(parse_request(raw, catalog, config), catalog, config).jobs
    except RequestInvalid:
        return None  # e.g. a toolkit without pins: no slim wheel is built here
    return job.to_dict()


def _arch_set(value: str) -> set[str]:
    return {a for a in value.replace(" ", ";").split(";") if a}


def _norm_req(req: str) -> str:
    name, _, marker = req.partition(";")
    clauses = [c.strip() for c in marker.replace('"', "'").split(" and ") if c.strip()]
    kept = [c for c in clauses if not c.startswith(("platform_system", "platform_machine"))]
    return name.replace(" ", "") + (f"; {' and '.join(kept)}" if kept else "")


class _Collector:
    def __init__(self, catalog: Catalog, minor: str, facts: UpstreamFacts) -> None:
        self.catalog, self.minor, self.facts, self.found = catalog, minor, facts, list[Finding]()

    def check(self, fact: str, ours: object, theirs: object, same: bool, source_key: str) -> None:
        reason = None if same else self.catalog.explanation(self.minor, fact)
        status: Status = "same" if same else ("explained" if reason else "DIFFERS")
        source = self.facts.provenance.get(source_key, "?")
        self.found.append(Finding(fact, status, _show(ours), _show(theirs), source, reason or ""))


def _show(value: object) -> str:
    if isinstance(value, list | tuple | set):
        return " ".join(sorted(str(v) for v in value)) if isinstance(value, set) else " ".join(map(str, value))
    return "-" if value is None else str(value)


def compare(catalog: Catalog, facts: UpstreamFacts) -> list[Finding]:
    release = catalog.release(facts.release)
    if release is None:
        raise KeyError(f"torch {facts.release} is not in the catalog")
    c = _Collector(catalog, release.torch, facts)
    if facts.python is not None:
        c.check("python", release.python, facts.python, set(release.python) == set(facts.python), "python")
    if facts.cuda is not None:
        c.check("cuda", release.all_cuda, facts.cuda, set(release.all_cuda) == set(facts.cuda), "cuda")
    for cuda, arch in sorted(facts.arch_lists.items()):
        ours = catalog.toolkit_for(release, cuda).default_arch_list if cuda in catalog.cuda else None
        c.check(
            f"cuda.{cuda}.arch_list", ours, arch, ours is not None and _arch_set(ours) == _arch_set(arch), "arch_list"
        )
    for cuda, reqs in sorted(facts.requirements.items()):
        if cuda not in release.all_cuda:
            continue
        ours_r = {_norm_req(r) for r in catalog.toolkit_for(release, cuda).requirements}
        theirs_r = {_norm_req(r) for r in reqs}
        c.check(f"cuda.{cuda}.requirements", ours_r, theirs_r, ours_r == theirs_r, "requirements")
    wheel_cudas = set(facts.arch_lists) if facts.nvcc_flags_seen is not None else set()
    for cuda in sorted((set(facts.env) | wheel_cudas) & set(release.all_cuda)):
        job = _rendered(catalog, release, "x86_64", cuda)
        if job is None:
            continue
        env = job["env"]
        for var, value in sorted(facts.env.get(cuda, {}).items()):
            c.check(f"cuda.{cuda}.env.{var}", env.get(var), value, env.get(var) == value, "env")
        if facts.nvcc_flags_seen is not None:
            flags = env.get("TORCH_NVCC_FLAGS", "")
            c.check(
                f"cuda.{cuda}.env.TORCH_NVCC_FLAGS",
                flags,
                "(in the wheel's CUDA flags)",
                flags in facts.nvcc_flags_seen,
                "env",
            )
    if facts.manylinux is not None:
        c.check("manylinux", release.manylinux, facts.manylinux, release.manylinux == facts.manylinux, "manylinux")
        c.check("rendered.manylinux", "2_28", facts.manylinux, facts.manylinux == "2_28", "manylinux")
    if facts.acl is not None or facts.openblas is not None:
        job = _rendered(catalog, release, "aarch64", None)
        args = job["image"]["build_args"] if job else {}
        for name, theirs in (("acl", facts.acl), ("openblas", facts.openblas)):
            if theirs is not None:
                ours_v = args.get("ACL_VERSION" if name == "acl" else "OPENBLAS_VERSION")
                c.check(f"aarch64.{name}", ours_v, theirs, ours_v == theirs, "aarch64")
    return c.found


def report(findings: list[Finding], release: str) -> str:
    lines = [f"torch {release}: {len(findings)} facts compared with upstream"]
    for f in findings:
        lines.append(f"  {f.status:<9} {f.fact}: catalog {f.catalog} | upstream {f.upstream}")
        if f.note:
            lines.append(f"            why: {f.note}")
    lines.append("  sources:")
    lines += [f"    {source}" for source in sorted({f.source for f in findings})]
    bad = sum(f.status == "DIFFERS" for f in findings)
    explained = sum(f.status == "explained" for f in findings)
    lines.append(f"torch {release}: {bad} unexplained difference(s), {explained} explained")
    return "\n".join(lines)
