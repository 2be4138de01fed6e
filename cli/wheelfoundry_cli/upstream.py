"""Read PyTorch's own release-build files: what upstream sets, for ``catalog verify``.

Each reader takes the text of one upstream file (a checkout, or the excerpt of it kept under
tests/fixtures/upstream/) and returns facts; nothing here runs upstream code. The shell reader
follows exactly the constructs PyTorch's build_cuda.sh uses (if/elif/else on the CUDA version and
on slim vs bundled, case arms per CUDA version, exports with defaults); a condition it cannot
decide makes it skip that block, so it never reports a value upstream might not set.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Read by `catalog verify` and by the watcher (functions/wheelfoundry), which cannot import this package.
from wheelfoundry.catalog.wheel_metadata import metadata_cuda as metadata_cuda
from wheelfoundry.catalog.wheel_metadata import metadata_python as metadata_python
from wheelfoundry.catalog.wheel_metadata import metadata_requirements as metadata_requirements

# Where each upstream file lives in the repositories that have held it (pytorch/pytorch since 2.6,
# pytorch/builder up to 2.5, pytorch/test-infra for the domain libraries' matrix).
CANDIDATES = {
    "build_cuda": (".ci/manywheel/build_cuda.sh", "manywheel/build_cuda.sh"),
    "build_common": (".ci/manywheel/build_common.sh", "manywheel/build_common.sh"),
    "build_cpu": (".ci/manywheel/build_cpu.sh", "manywheel/build_cpu.sh"),
    "matrix": (".github/scripts/generate_binary_build_matrix.py", "tools/scripts/generate_binary_build_matrix.py"),
    "aarch64": (".ci/aarch64_linux/aarch64_wheel_ci_build.py", "aarch64_linux/aarch64_wheel_ci_build.py"),
    "aarch64_legacy": ("build_aarch64_wheel.py",),  # pytorch/builder's aarch64 wheel script up to 2.0
    "openblas": (".ci/docker/common/install_openblas.sh", "common/install_openblas.sh"),
    "metadata": ("METADATA",),
    "wheel": ("WHEEL",),
    "build_strings": ("build-strings.txt",),
    "torch_config": ("torch-config.txt",),  # python -c "import torch; print(torch.__config__.show())"
    "version": ("version.txt",),
    "aarch64_strings": ("aarch64-strings.txt",),  # strings of a published aarch64 wheel's ACL and OpenBLAS
    "needed": ("needed.txt",),  # readelf -d NEEDED entries of a published CUDA wheel's torch/lib/*.so
}


@dataclass
class UpstreamFiles:
    root: Path
    found: dict[str, Path] = field(default_factory=dict)

    @classmethod
    def scan(cls, root: Path) -> UpstreamFiles:
        files = cls(root)
        for kind, paths in CANDIDATES.items():
            for rel in paths:
                if (root / rel).is_file():
                    files.found[kind] = root / rel
                    break
        return files

    def text(self, kind: str) -> str | None:
        path = self.found.get(kind)
        return path.read_text(encoding="utf-8") if path else None


# --- build_cuda.sh ----------------------------------------------------------------------------------
_COND = re.compile(r"^\s*(?:if|elif)\s+\[\[\s*(?P<expr>.*?)\s*\]\]\s*;\s*then\s*$")
_TERM = re.compile(r'^"?\$\{?(?P<var>\w+)\}?"?\s*(?P<op>==|!=|=)\s*"?(?P<pat>[^"\s]*)"?$')
_ASSIGN = re.compile(r'^\s*(?:export\s+)?(?P<var>[A-Z_][A-Z0-9_]*)=(?P<value>"(?:\$\([^)]*\)|[^"])*"|\'[^\']*\'|\S*)')
_ARM = re.compile(r"^\s*(?P<pats>[0-9.*\[\]|-]+)\)\s*(?P<rest>.*)$")
_SUBST = re.compile(r'\$\((?:\[\[[^]]*\]\]\s*&&\s*echo\s*"[^"]*"\s*\|\|\s*echo\s*"(?P<no>[^"]*)")\)')
_VAR = re.compile(r"\$\{(?P<a>\w+)(?::-(?P<default>[^}]*))?\}|\$(?P<b>\w+)")


def _expand(value: str, env: dict[str, str]) -> str:
    value = _SUBST.sub(lambda m: m["no"], value)  # `$([[ $ARCH == aarch64 ]] && echo A || echo B)` on x86_64
    value = value.strip('"').strip("'")
    return _VAR.sub(lambda m: env.get(m["a"] or m["b"], m["default"] or ""), value)


def _decide(expr: str, facts: dict[str, str]) -> bool | None:
    """True/False for the conditions build_cuda.sh uses; None when this reader cannot know."""
    if re.fullmatch(r'-z\s+"?\$\{?PYTORCH_EXTRA_INSTALL_REQUIREMENTS\}?"?', expr):
        return False  # slim wheels: the requirements are always given
    if re.fullmatch(r'-n\s+"?\$\{?PYTORCH_EXTRA_INSTALL_REQUIREMENTS\}?"?', expr):
        return True
    results = []
    for term in re.split(r"\s*\|\|\s*", expr):
        match = _TERM.match(term.strip())
        if match is None or match["var"] not in facts:
            return None
        hit = fnmatch.fnmatchcase(facts[match["var"]], match["pat"])
        results.append(hit if match["op"] != "!=" else not hit)
    return any(results)


def cuda_exports(text: str, cuda: str) -> dict[str, str]:
    """Variables build_cuda.sh leaves set for a slim x86_64 wheel of ``cuda`` (e.g. "12.4")."""
    kind = "cpu" if cuda == "cpu" else "cuda"
    facts = {"CUDA_VERSION": cuda, "ARCH": "x86_64", "GPU_ARCH_TYPE": kind, "PACKAGE_TYPE": "manywheel"}
    env: dict[str, str] = {}
    stack: list[tuple[bool | None, bool]] = []  # (this branch active?, some branch already taken)
    in_case, arm_active = False, False
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        stripped = line.strip()
        if not stripped:
            continue
        active = all(a is True for a, _ in stack)
        unknown = any(a is None for a, _ in stack)
        if (cond := _COND.match(line)) is not None:
            if stripped.startswith("if"):
                stack.append((_decide(cond["expr"], facts), False))
            elif stack:
                was, taken = stack[-1]
                taken = taken or was is True
                now = _decide(cond["expr"], facts)
                stack[-1] = (False if taken else now, taken or (was is None))
            continue
        if stripped == "else" and stack:
            was, taken = stack[-1]
            stack[-1] = (None if was is None else not (taken or was), True)
            continue
        if stripped == "fi" and stack:
            stack.pop()
            continue
        if re.match(r"case \$\{?CUDA_VERSION\}? in", stripped):
            in_case, arm_active = True, False
            continue
        if in_case:
            if stripped == "esac":
                in_case = False
                continue
            arm = _ARM.match(line)
            if arm is not None and not stripped.startswith(("TORCH", "export", "EXTRA")):
                arm_active = any(fnmatch.fnmatchcase(cuda, p) for p in arm["pats"].split("|"))
                stripped = arm["rest"].strip()
            if not arm_active or not stripped:
                continue
        if not active or unknown or "//" in stripped:
            continue
        assign = _ASSIGN.match(stripped)
        if assign is not None:
            env[assign["var"]] = _expand(assign["value"], {**facts, **env})
    return env


def arch_list(text: str, cuda: str) -> str | None:
    """The default TORCH_CUDA_ARCH_LIST build_cuda.sh builds ``cuda`` with (x86_64)."""
    value = cuda_exports(text, cuda).get("TORCH_CUDA_ARCH_LIST")
    return value or None


# --- generate_binary_build_matrix.py ------------------------------------------------------------------
def _literal(tree: ast.Module, name: str) -> Any:
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
                try:
                    return ast.literal_eval(node.value)
                except ValueError:
                    return None
    return None


@dataclass(frozen=True)
class Matrix:
    python: tuple[str, ...]
    cuda: tuple[str, ...]
    requirements: dict[str, tuple[str, ...]]


def read_matrix(text: str, channel: str = "test") -> Matrix:
    """Python and CUDA versions (and nvidia-* pins where the file has them).

    pytorch/pytorch's file has FULL_PYTHON_VERSIONS / CUDA_ARCHES; test-infra's has per-channel dicts,
    whose ``test`` channel on release/X.Y is the X.Y release candidates' matrix.
    """
    tree = ast.parse(text)
    python = _literal(tree, "FULL_PYTHON_VERSIONS")
    cuda = _literal(tree, "CUDA_ARCHES")
    if python is None:
        python = (_literal(tree, "PYTHON_ARCHES_DICT") or {}).get(channel)
    if cuda is None:  # test-infra spelled it CUDA_ACRHES_DICT until 2023 (the 1.12-1.13 matrices)
        cuda = (_literal(tree, "CUDA_ARCHES_DICT") or _literal(tree, "CUDA_ACRHES_DICT") or {}).get(channel)
    pins = _literal(tree, "PYTORCH_EXTRA_INSTALL_REQUIREMENTS") or {}
    requirements = {str(k): split_requirements(str(v)) for k, v in pins.items() if re.fullmatch(r"\d+\.\d+", str(k))}
    return Matrix(tuple(python or ()), tuple(cuda or ()), requirements)


def split_requirements(text: str) -> tuple[str, ...]:
    """``"a==1; marker | b==2"`` -> ("a==1", "b==2"): markers dropped, as the catalog keeps them."""
    return tuple(part.split(";", 1)[0].strip() for part in text.split("|") if part.strip())


# --- wheel metadata, build strings, aarch64 ---------------------------------------------------------
def wheel_manylinux(text: str) -> str | None:
    match = re.search(r"^Tag:\s*\S+-manylinux_(\d+_\d+)_x86_64", text, re.M)
    return match[1] if match else None


def gencode_arch_list(text: str) -> str | None:
    """``-gencode arch=compute_90,code=sm_90 ... code=compute_120`` -> "...;9.0;12.0+PTX"."""
    found = re.findall(r"arch=compute_(\d+)[a-z]?,code=(sm|compute)_(\d+)", text)
    archs: list[str] = []
    for _, kind, num in found:
        arch = f"{num[:-1]}.{num[-1]}"
        label = arch if kind == "sm" else f"{arch}+PTX"
        if kind == "compute" and arch in archs:
            archs[archs.index(arch)] = label
        elif arch not in archs and f"{arch}+PTX" not in archs:
            archs.append(label)
    return ";".join(archs) or None


def _tag_after(text: str, anchor: str) -> str | None:
    """The first ``vX.Y[.Z]`` git tag within a few lines after ``anchor`` (a clone command)."""
    at = text.find(anchor)
    match = re.search(r"\bv\d+\.\d+(?:\.\d+)?\b", text[at : at + 240]) if at >= 0 else None
    return match[0] if match else None


def aarch64_build_vars(text: str) -> dict[str, str]:
    """KEY=VALUE words of aarch64_wheel_ci_build.py's ``build_vars`` strings (each ends in a space).

    For the CPU wheel: strings naming NVPL are the CUDA-aarch64 branch; values with f-string fields
    (versions, dates) are left out.
    """
    out: dict[str, str] = {}
    for literal in re.findall(r'f?"([^"\n]*= *[^"\n]* )"', text):
        if "NVPL" in literal:
            continue
        for key, value in re.findall(r"(?:^|\s)([A-Z][A-Za-z0-9_]*)=(\S+)", literal):
            if "{" not in value and "}" not in value:
                out[key] = value
    return out


_BLAS = {"mkl": "MKL", "open": "OpenBLAS", "openblas": "OpenBLAS"}


def torch_config(text: str) -> tuple[dict[str, str], bool | None]:
    """A published wheel's own record of its build: torch.__config__.show()'s "Build settings" as
    build variables (BLAS_INFO=mkl -> BLAS=MKL), and the C++11 ABI when the file adds
    ``_GLIBCXX_USE_CXX11_ABI=True|False`` (torch._C._GLIBCXX_USE_CXX11_ABI)."""
    env: dict[str, str] = {}
    match = re.search(r"Build settings:(.*)", text)
    for item in (match[1] if match else "").split(", "):
        key, _, value = item.strip().partition("=")
        if key in ("USE_CUDA", "USE_MKLDNN", "USE_MPI", "USE_OPENMP"):  # USE_NCCL, USE_CUDNN follow USE_CUDA
            env[key] = value.strip()
        elif key == "BLAS_INFO":
            env["BLAS"] = _BLAS.get(value.strip(), value.strip())
    abi = re.search(r"_GLIBCXX_USE_CXX11_ABI=(True|False)", text)
    return env, (abi[1] == "True") if abi else None


def acl_version(text: str) -> str | None:
    return _tag_after(text, "ComputeLibrary.git")


def openblas_version(text: str) -> str | None:
    return _tag_after(text, "OpenBLAS.git") or _tag_after(text, "xianyi/OpenBLAS")


def legacy_aarch64_mkldnn(text: str) -> bool | None:
    """build_aarch64_wheel.py (builder, up to 2.0): False when it never sets USE_MKLDNN (1.12, 1.13: off,
    CMake's aarch64 default); None when it may (2.0, behind --enable-mkldnn: the wheel's ACL says yes)."""
    return False if "USE_MKLDNN" not in text else None


def build_strings_abi(text: str) -> bool | None:
    """The C++11 ABI a wheel was built with, from its CXX flags (-D_GLIBCXX_USE_CXX11_ABI=0/1, up to 2.7) or,
    where they are not recorded (2.8 on), from how libtorch_cpu.so exports at::TensorBase::toString (the
    new ABI tags functions returning std::string with B5cxx11); None: neither in the text."""
    flag = re.search(r"-D_GLIBCXX_USE_CXX11_ABI=([01])\b", text)
    if flag:
        return flag[1] == "1"
    symbol = re.search(r"_ZNK2at10TensorBase8toString(B5cxx11)?Ev\b", text)
    return (symbol[1] is not None) if symbol else None


def abi_rule(text: str) -> bool | None:
    """build_common.sh: the C++11 ABI follows DESIRED_DEVTOOLSET (None: not in this excerpt)."""
    return True if "_GLIBCXX_USE_CXX11_ABI=1" in text else None
