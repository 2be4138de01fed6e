"""``wheelfoundry catalog verify``: the catalog and the rendered builds against upstream's files.

Upstream facts come from a checkout (or a folder with the few upstream files, laid out as in their
repositories; see upstream.CANDIDATES) or from a facts TOML written by ``catalog extract`` from such
files, with each fact's provenance. Every difference is printed; one the catalog does not explain
in its ``[explained]`` table makes the command exit 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from wheelfoundry.catalog.catalog import Catalog, Release
from wheelfoundry.config import load_config
from wheelfoundry.errors import RequestInvalid
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request
from wheelfoundry_cli.upstream_facts import UpstreamFacts

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


def release_or_moving(catalog: Catalog, name: str) -> Release | None:
    """A catalog release (X.Y), or ``nightly`` / ``main`` seen as one (their own Python and CUDA lists)."""
    moving = catalog.moving.get(name)
    if moving is None:
        return catalog.release(name)
    return Release(
        torch=name,
        patches=(0,),
        python=moving.python,
        cuda=moving.cuda,
        cuda_experimental=(),
        libraries={},
        python_limits={},
        overrides={},
        cxx11_abi=moving.cxx11_abi,
        source="",
        sources=moving.sources,
    )


def _rendered(catalog: Catalog, release: Release, platform: str, cuda: str | None) -> dict[str, Any] | None:
    target: dict[str, Any] = {"platform": platform, "accelerator": "cuda" if cuda else "cpu"}
    if cuda:
        target["cuda"] = cuda
    raw = {
        "version": release.torch if release.torch in catalog.moving else release.latest_patch(),
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


def _flag(value: str | None) -> str | None:
    return {"ON": "1", "OFF": "0", "TRUE": "1", "FALSE": "0"}.get((value or "").upper(), value)


def _platform_env(
    c: _Collector, catalog: Catalog, release: Release, platform: str, label: str, upstream_env: dict[str, str]
) -> None:
    """A CPU wheel's build variables: upstream's against the rendered job's (ON/OFF read as 1/0)."""
    if not upstream_env:
        return
    job = _rendered(catalog, release, platform, None)
    env = job["env"] if job else {}
    for var, value in sorted(upstream_env.items()):
        ours = env.get(var)
        c.check(f"{label}.env.{var}", ours, value, _flag(ours) == _flag(value), f"{label}_env")


def compare(catalog: Catalog, facts: UpstreamFacts) -> list[Finding]:
    release = release_or_moving(catalog, facts.release)
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
        version = None if release.torch in catalog.moving else release.latest_patch()  # upstream facts: its wheel
        ours_r = {_norm_req(r) for r in catalog.cuda_requirements(release, cuda, version)}
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
    _platform_env(c, catalog, release, "x86_64", "cpu", facts.cpu_env)
    _platform_env(c, catalog, release, "aarch64", "aarch64", facts.aarch64_env)
    if facts.cxx11_abi is not None:
        same = release.cxx11_abi == facts.cxx11_abi
        c.check("cxx11_abi", release.cxx11_abi, facts.cxx11_abi, same, "cxx11_abi")
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
    _aarch64_mkldnn(c, catalog, release, facts)
    return c.found


def _aarch64_mkldnn(c: _Collector, catalog: Catalog, release: Release, facts: UpstreamFacts) -> None:
    """oneDNN in an aarch64 request that leaves mkldnn out, against upstream's wheel (an ACL in it: yes);
    without oneDNN, neither ACL in the build nor in its image (ACL_VERSION=none)."""
    theirs = facts.mkldnn if facts.mkldnn is not None else (True if facts.acl else None)
    if theirs is None:
        return
    job = _rendered(catalog, release, "aarch64", None)
    env, args = (job["env"], job["image"]["build_args"]) if job else ({}, {})
    ours = {"USE_MKLDNN": env.get("USE_MKLDNN"), "USE_MKLDNN_ACL": env.get("USE_MKLDNN_ACL")}
    want = {"USE_MKLDNN": "1", "USE_MKLDNN_ACL": "1"} if theirs else {"USE_MKLDNN": "0", "USE_MKLDNN_ACL": "0"}
    if not theirs:
        ours["ACL_VERSION"], want["ACL_VERSION"] = args.get("ACL_VERSION"), "none"
    show = " ".join(f"{k}={v}" for k, v in ours.items()), " ".join(f"{k}={v}" for k, v in want.items())
    c.check("aarch64.mkldnn", show[0], show[1], ours == want, "aarch64")


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
