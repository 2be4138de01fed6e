"""Upstream facts: what PyTorch's own release-build files say, with where each fact was read.

They come from upstream files in a folder laid out as in their repositories (upstream.CANDIDATES: a
checkout, or the few files copied out of one) or from a facts TOML that ``catalog extract`` wrote
from such files (the test fixtures: facts and provenance, not copies of upstream files).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wheelfoundry.catalog.catalog import Release
from wheelfoundry_cli import upstream

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
        "LD_LIBRARY_PATH",
        "PYTORCH_BUILD_VERSION",
        "DIR_SUFFIX",
        "GPU_ARCH_TYPE",
        "SOURCE_DIR",
    ]
)


_SCALARS = ("python", "cuda", "nvcc_flags_seen", "cxx11_abi", "manylinux", "acl", "openblas", "mkldnn")


@dataclass
class UpstreamFacts:
    release: str
    python: tuple[str, ...] | None = None
    cuda: tuple[str, ...] | None = None
    arch_lists: dict[str, str] = field(default_factory=dict)
    requirements: dict[str, tuple[str, ...]] = field(default_factory=dict)
    env: dict[str, dict[str, str]] = field(default_factory=dict)
    cpu_env: dict[str, str] = field(default_factory=dict)  # x86_64 CPU wheel (build_cpu.sh)
    aarch64_env: dict[str, str] = field(default_factory=dict)  # aarch64 CPU wheel build variables
    nvcc_flags_seen: str | None = None
    cxx11_abi: bool | None = None
    manylinux: str | None = None
    acl: str | None = None
    openblas: str | None = None
    mkldnn: bool | None = None  # the aarch64 CPU wheel has oneDNN (None: not read; an ACL in it says yes)
    provenance: dict[str, str] = field(default_factory=dict)

    def merge(self, other: UpstreamFacts) -> None:
        for name in _SCALARS:
            if getattr(self, name) is None:
                setattr(self, name, getattr(other, name))
        for name in ("arch_lists", "requirements", "cpu_env", "aarch64_env"):
            for key, value in getattr(other, name).items():
                getattr(self, name).setdefault(key, value)
        for cuda, env in other.env.items():  # one CUDA's variables may come from several files
            mine = self.env.setdefault(cuda, {})
            for var, value in env.items():
                mine.setdefault(var, value)
        for key, text in other.provenance.items():  # every file a kind of fact came from
            seen = self.provenance.get(key)
            self.provenance[key] = text if seen is None else seen if text in seen else f"{seen}; {text}"


# A CUDA wheel's libraries link these dynamically only when upstream built it with these switches; the
# absence of a library proves nothing (it may be dlopen'ed), so only present ones become facts.
_NEEDED_ENV = (
    (r"libcudart\.so", "USE_CUDA_STATIC_LINK", "0"),
    (r"libnccl\.so", "USE_STATIC_NCCL", "0"),
    (r"libcupti\.so", "USE_CUPTI_SO", "1"),
    (r"libcusparseLt[.-]", "USE_CUSPARSELT", "1"),
    (r"libcufile\.so", "USE_CUFILE", "1"),
)


def needed_env(text: str) -> dict[str, str]:
    """Build switches a CUDA wheel's NEEDED entries (``readelf -d``) show."""
    return {var: value for pattern, var, value in _NEEDED_ENV if re.search(rf"NEEDED \[?{pattern}", text)}


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
        if "-Xfatbin" in text:  # the wheel recorded its CUDA flags (not every release's strings hold them)
            facts.nvcc_flags_seen = text
            facts.provenance["env"] = cite["build_strings"]
        if (abi := upstream.build_strings_abi(text)) is not None:
            facts.cxx11_abi = abi
            facts.provenance["cxx11_abi"] = cite["build_strings"]
    if (text := files.text("needed")) is not None and wheel_cuda:
        facts.env.setdefault(wheel_cuda, {}).update(needed_env(text))
        seen = facts.provenance.get("env")
        facts.provenance["env"] = f"{seen}; {cite['needed']}" if seen else cite["needed"]
    if (text := files.text("torch_config")) is not None:
        config_env, abi = upstream.torch_config(text)
        facts.cpu_env.update(config_env)
        facts.provenance["cpu_env"] = cite["torch_config"]
        if abi is not None:
            facts.cxx11_abi = abi
            facts.provenance["cxx11_abi"] = cite["torch_config"]
    if (text := files.text("build_cpu")) is not None:
        exports = upstream.cuda_exports(text, "cpu")
        facts.cpu_env = {k: v for k, v in exports.items() if k not in INFORMATIONAL}
        facts.provenance["cpu_env"] = cite["build_cpu"]
    if (text := files.text("aarch64")) is not None:
        variables = upstream.aarch64_build_vars(text)
        facts.aarch64_env = {k: v for k, v in variables.items() if k not in INFORMATIONAL}
        facts.provenance["aarch64_env"] = cite["aarch64"]
        facts.acl = upstream.acl_version(text)
        facts.openblas = upstream.openblas_version(text)
        facts.provenance["aarch64"] = cite["aarch64"]
    if (text := files.text("aarch64_legacy")) is not None:
        facts.mkldnn = upstream.legacy_aarch64_mkldnn(text)
        facts.openblas = facts.openblas or upstream.openblas_version(text)
        facts.provenance["aarch64"] = cite["aarch64_legacy"]
    if (text := files.text("aarch64_strings")) is not None:  # the libraries' own version strings
        acl = re.search(r"arm_compute_version=(v[\d.]+)", text)
        blas = re.search(r"OpenBLAS (\d+\.\d+\.\d+)", text)
        facts.acl = facts.acl or (acl[1] if acl else None)
        facts.openblas = facts.openblas or (f"v{blas[1]}" if blas else None)
        facts.provenance["aarch64"] = cite["aarch64_strings"]
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
        cxx11_abi=raw.get("cxx11_abi"),
        cpu_env=dict(raw.get("cpu_env", {})),
        aarch64_env=dict(raw.get("aarch64_env", {})),
        nvcc_flags_seen=raw.get("nvcc_flags_seen"),
        manylinux=raw.get("manylinux"),
        acl=raw.get("acl"),
        openblas=raw.get("openblas"),
        mkldnn=raw.get("mkldnn"),
        provenance=dict(data.get("provenance", {})),
    )


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return '"' + escaped + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    return "[" + ", ".join(_toml_value(v) for v in value) + "]"


def facts_toml(facts: UpstreamFacts) -> str:
    lines = [
        "# Written by `wheelfoundry catalog extract`: upstream facts, not upstream files.",
        f'release = "{facts.release}"',
    ]
    lines.append("[provenance]")
    lines += [f'"{k}" = {_toml_value(v)}' for k, v in sorted(facts.provenance.items())]
    lines.append("[facts]")
    for name in _SCALARS:
        value = getattr(facts, name)
        if value is not None:
            lines.append(f"{name} = {_toml_value(value)}")
    for name in ("arch_lists", "requirements"):
        if getattr(facts, name):
            lines.append(f"[facts.{name}]")
            lines += [f'"{k}" = {_toml_value(v)}' for k, v in sorted(getattr(facts, name).items())]
    for name in ("cpu_env", "aarch64_env"):
        if getattr(facts, name):
            lines.append(f"[facts.{name}]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in sorted(getattr(facts, name).items())]
    for cuda, env in sorted(facts.env.items()):
        lines.append(f'[facts.env."{cuda}"]')
        lines += [f"{k} = {_toml_value(v)}" for k, v in sorted(env.items())]
    return "\n".join(lines) + "\n"
