"""docs/catalog.md, generated from data/catalog.toml (``wheelfoundry catalog docs``); a test keeps it current."""

from __future__ import annotations

from pathlib import Path

from wheelfoundry.catalog.catalog import Catalog, Release

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "docs" / "catalog.md"


def _span(versions: tuple[str, ...]) -> str:
    return f"{versions[0]}–{versions[-1]}" if len(versions) > 2 else ", ".join(versions) or "—"


def _cuda(release: Release) -> str:
    text = ", ".join(release.cuda) or "—"
    text += f" / {', '.join(release.cuda_experimental)}" if release.cuda_experimental else ""
    return text + (f"; aarch64: {', '.join(release.aarch64_cuda)}" if release.aarch64_cuda else "")


def _libraries(release: Release) -> str:
    return ", ".join(f"{name} {minor.lstrip('=')}" for name, minor in release.libraries.items()) or "—"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(catalog: Catalog) -> str:
    out = [
        "# The compatibility catalog",
        "",
        "Generated from `functions/wheelfoundry/data/catalog.toml` by `wheelfoundry catalog docs`; "
        "`tests/test_catalog_sources.py` fails when this page is stale. Each fact's source names a "
        "repository, ref and path (refs at the end); `unverified:` says why a fact could not be read "
        "upstream. `wheelfoundry catalog verify --upstream DIR` compares the catalog with upstream files.",
        "",
        "## Releases",
        "",
        "| torch | patches | Python | CUDA (stable / experimental) | libraries | C++11 ABI | manylinux (upstream) "
        "| aarch64 ACL / OpenBLAS | pairing source |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in catalog.releases:
        acl = r.aarch64.get("acl", "farm pin") if r.aarch64_mkldnn else "none (mkldnn off by default)"
        aarch = f"{acl} / {r.aarch64.get('openblas', 'farm pin')}"
        patches = ", ".join(str(p) for p in r.patches)
        out.append(
            f"| {r.torch} | {patches} | {_span(r.python)} | {_cuda(r)} | {_libraries(r)} | "
            f"{'yes' if r.cxx11_abi else 'no'} | {r.manylinux} | {aarch} | {_cell(r.source)} |"
        )
    out += ["", "## Domain libraries", "", "| library | wheels built here | switches | source |", "|---|---|---|---|"]
    for name, lib in catalog.libraries.items():
        if name == "torch":
            continue
        native = "native: repaired (torch's libraries excluded), smoke-tested with the job's torch"
        kind = native if lib.native else "pure Python: no auditwheel"
        switches = " ".join(f"{k}={v}" for k, v in sorted(lib.env.items())) or "—"
        out.append(f"| {name} | {kind} | {switches} | {_cell(lib.sources.get('native', ''))} |")
    out += [
        "",
        "## CUDA toolkits",
        "",
        "Each is assembled in the builder image (and in host mode) from a lock of NVIDIA's published "
        "artifacts, every file with its sha256: `buildspecs/images/scripts/cuda/cuda-<CUDA>-<platform>.toml` "
        "(`tools/lock_cuda.py`; docs/security.md §5).",
        "",
        "| CUDA | NVIDIA release | compiler from | host GCC (newest nvcc accepts) | platforms |",
        "|---|---|---|---|---|",
    ]
    for version, tk in catalog.cuda.items():
        if not tk.requirements:
            continue
        major = int(tk.toolkit.split(".")[0]) if tk.toolkit else 0
        origin = "nvidia-* wheels (PyPI)" if major >= 13 else "redist archives (developer.download.nvidia.com)"
        out.append(f"| {version} | {tk.toolkit} | {origin} | gcc {tk.gcc_max} | {', '.join(tk.platforms)} |")
    out += [
        "",
        "## CUDA builds per release",
        "",
        "| torch | CUDA | platform | TORCH_CUDA_ARCH_LIST | slim pins | build_cuda.sh variables |",
    ]
    out.append("|---|---|---|---|---|---|")
    for r in catalog.releases:
        for platform, cudas in (("x86_64", r.all_cuda), ("aarch64", r.aarch64_cuda)):
            for cuda in cudas:
                if cuda not in catalog.cuda:  # no repository row: each deployment locks it (docs/watch.md)
                    out.append(f"| {r.torch} | {cuda} | {platform} | the stack's | the stack's lock | — |")
                    continue
                tk = catalog.toolkit_for(r, cuda, platform)
                env = " ".join(f"{k}={v}" for k, v in sorted(catalog.cuda_env(r, cuda, platform).items()))
                pins = f"{len(tk.requirements)} pins" if tk.requirements else "none: no slim wheel"
                tritons = sorted({req.split(";")[0] for req in r.triton.values()}) if tk.requirements else []
                pins += f" + {', '.join(tritons)}" if tritons else ""
                out.append(f"| {r.torch} | {cuda} | {platform} | `{tk.default_arch_list}` | {pins} | {_cell(env)} |")
    out += ["", "## Sources per release", "", "| torch | fact | source |", "|---|---|---|"]
    for r in catalog.releases:
        for fact, source in r.sources.items():
            out.append(f"| {r.torch} | {fact} | {_cell(source)} |")
    for name, ref in catalog.moving.items():
        for fact, source in ref.sources.items():
            out.append(f"| {name} | {fact} | {_cell(source)} |")
    out += ["", "## Deliberate differences from upstream", "", "| releases:fact | why |", "|---|---|"]
    out += [f"| `{_cell(k)}` | {_cell(v)} |" for k, v in catalog.explained.items()]
    out += ["", "## Refs", "", "| ref | repository, branch or file (commit) |", "|---|---|"]
    out += [f"| {k} | {_cell(v)} |" for k, v in catalog.refs.items()]
    return "\n".join(out) + "\n"
