"""Deterministic nvcc compiles: a launcher in front of nvcc (or ``sccache nvcc``) for setuptools builds.

``PYTORCH_NVCC="python3 <bundle>/wfbuild/compiling/nvcc.py [sccache] <CUDA_HOME>/bin/nvcc"`` (build-library.sh sets
it; torch.utils.cpp_extension's ninja build runs it for every ``.cu`` file). Three things make two
compiles of one ``.cu`` file differ, even in one folder (seen with nvcc 13.0):

- internal-linkage names (a kernel in an anonymous namespace: ``_ZN36_GLOBAL__N__<hash>_4_k_cu_<rand>``,
  ``_INTERNAL_<hash>_...``) carry a random part per compilation: ``-frandom-seed`` replaces it, and
  nvcc's help asks for "different seed to different files": the seed is derived from the file's path
  relative to the source root (``WF_SRC_DIR``), the same in every folder and on every rebuild;
- the ``<hash>`` is a hash of the source's absolute path (nvcc resolves the input with realpath and
  hands it to cudafe++ and cicc as ``--orig_src_path_name``): a later ``--orig_src_path_name`` of the
  relative path, given to both (they must agree: the host stub registers the kernel by that name), wins;
- the host object names its intermediate file ``tmpxft_<pid>_00000000-6_k.cudafe1.cpp`` (its STT_FILE
  symbol): after a successful compile the pid field in the object (``-o``) is zeroed, same length, so
  the object stays valid. (Under sccache, which renames the intermediates itself, there is none.)

The flags are arguments, so sccache hashes them: a different seed or path is a different key, and the
same source gets the same flags wherever and whenever it is built. Standard library only: it runs under
whichever python3 the stage has.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence

CUDA_SUFFIXES = (".cu",)
TMPXFT = re.compile(rb"tmpxft_[0-9a-f]{8}_")
ZEROED = b"tmpxft_00000000_"
# nvcc splits an -X<tool> value on commas; a path it could split gets a name of its digest instead
SAFE_PATH = re.compile(r"[A-Za-z0-9_./+-]+")


def relative_source(source: str, root: str | None) -> str:
    """``source`` relative to ``root`` (both resolved, as nvcc resolves its input), or its real path."""
    real = os.path.realpath(source)
    if root:
        base = os.path.realpath(root)
        if real == base or real.startswith(base.rstrip("/") + "/"):
            return os.path.relpath(real, base)
    return real


def per_file_nvcc_flags(source: str, root: str | None) -> list[str]:
    """The flags that make nvcc's output for ``source`` independent of the build's folder, time and pid.

    The one place nvcc's per-file reproducibility flags are assembled (constant flags, such as the
    host compiler's ``-ffile-prefix-map`` or ``--threads``, travel in NVCC_APPEND_FLAGS instead)."""
    relative = relative_source(source, root)
    digest = hashlib.sha256(relative.encode("utf-8", "surrogateescape")).hexdigest()
    path = relative if SAFE_PATH.fullmatch(relative) else f"wf-{digest[:16]}.cu"
    return [
        f"-frandom-seed={digest[:16]}",
        "-Xcudafe",
        f"--orig_src_path_name={path}",
        "-Xcicc",
        f"--orig_src_path_name={path}",
    ]


def cuda_sources(args: Sequence[str]) -> list[str]:
    return [a for a in args if a.endswith(CUDA_SUFFIXES) and not a.startswith("-") and os.path.isfile(a)]


def output_of(args: Sequence[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg in ("-o", "--output-file") and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--output-file="):
            return arg.split("=", 1)[1]
    return None


def zero_tmpxft(path: str) -> int:
    """Zero the pid in nvcc's intermediate-file names inside an object; how many were rewritten."""
    with open(path, "rb") as handle:
        data = handle.read()
    fixed, count = TMPXFT.subn(ZEROED, data)
    if fixed != data:
        with open(path, "wb") as handle:
            handle.write(fixed)
    return count


def command(argv: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """``argv`` (``[sccache] nvcc ARGS``) with the per-file flags appended when it compiles one .cu file."""
    sources = cuda_sources(argv[1:])
    if len(sources) != 1 or ("-c" not in argv and "--compile" not in argv):
        return list(argv)
    return [*argv, *per_file_nvcc_flags(sources[0], environ.get("WF_SRC_DIR"))]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python3 -m wfbuild.compiling.nvcc [sccache] NVCC ARGS...", file=sys.stderr)
        return 2
    full = command(args, os.environ)
    code = subprocess.run(full, check=False).returncode
    out = output_of(args)
    if code == 0 and full != args and out and os.path.isfile(out):
        zero_tmpxft(out)
    return code


if __name__ == "__main__":
    sys.exit(main())
