"""A CUDA_HOME whose ``bin/nvcc`` is the reproducibility launcher, for builds that run nvcc by its path.

torch.utils.cpp_extension runs ``PYTORCH_NVCC`` (wfbuild.compiling.nvcc, set by lib.sh) only in its ninja build.
With ``BuildExtension.with_options(use_ninja=False)`` (the PyG packages: torch-scatter, torch-cluster,
torch-spline-conv) it runs ``os.path.join(CUDA_HOME, "bin", "nvcc")``, and a setup.py may do the same:
those compiles got neither the per-file seed nor the source name, nor the compiler cache. Such builds
get this folder as CUDA_HOME: each entry of the real toolkit is a symlink to it, but ``bin/nvcc`` is a
script that runs the launcher (``nvcc.py``, copied beside it: standard library only) in front of what
``PYTORCH_NVCC`` held before (``sccache <nvcc>`` or the real nvcc), so both ways compile alike.

The folder is named by a digest of everything it holds (the real toolkit, the python, the command, the
launcher's bytes) and lives under ``$WF_CACHE_DIR`` (else ``$TMPDIR``): the same path on every rebuild
and from every job folder, so the ``-I<CUDA_HOME>/include`` the compilers see never varies between two
builds of one source. Made in a scratch folder and renamed into place, so concurrent jobs share it.

``python3 -m wfbuild.compiling.cuda_home --cuda-home DIR --python PY --next "sccache DIR/bin/nvcc"`` prints it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
from pathlib import Path

LAUNCHER = Path(__file__).with_name("nvcc.py")
READY = ".wf-ready"


def key(real: Path, python: str, next_command: str) -> str:
    launcher = hashlib.sha256(LAUNCHER.read_bytes()).hexdigest()
    ident = [os.path.realpath(real), python, next_command, launcher]
    return hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:16]


def script(dest: Path, python: str, next_command: str) -> str:
    words = [python, str(dest / "bin" / "wf-nvcc.py"), *shlex.split(next_command)]
    return (
        "#!/bin/sh\n# wfbuild.compiling.cuda_home: nvcc behind the reproducibility launcher\nexec "
        + shlex.join(words)
        + ' "$@"\n'
    )


def make(real: Path, python: str, next_command: str, root: Path) -> Path:
    """The shim for ``real`` under ``root`` (made once; later calls return it)."""
    real = Path(os.path.realpath(real))
    if not (real / "bin" / "nvcc").exists():
        raise FileNotFoundError(f"{real}/bin/nvcc does not exist: CUDA_HOME is not a CUDA toolkit")
    dest = root / f"cuda-home-{key(real, python, next_command)}"
    if (dest / READY).exists():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    scratch = root / f".{dest.name}.{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / "bin").mkdir(parents=True)
    for entry in sorted(real.iterdir()):
        if entry.name != "bin":
            (scratch / entry.name).symlink_to(entry)
    for tool in sorted((real / "bin").iterdir()):
        if tool.name != "nvcc":
            (scratch / "bin" / tool.name).symlink_to(tool)
    shutil.copyfile(LAUNCHER, scratch / "bin" / "wf-nvcc.py")
    nvcc = scratch / "bin" / "nvcc"
    nvcc.write_text(script(dest, python, next_command), encoding="utf-8")
    nvcc.chmod(0o755)
    (scratch / READY).write_text(json.dumps({"cuda_home": str(real), "next": next_command}), encoding="utf-8")
    try:
        scratch.rename(dest)
    except OSError:  # another job made it first: theirs is the same
        shutil.rmtree(scratch, ignore_errors=True)
        if not (dest / READY).exists():
            raise
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m wfbuild.compiling.cuda_home", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--cuda-home", type=Path, required=True, help="the real toolkit")
    parser.add_argument("--python", required=True, help="the python that runs the launcher")
    parser.add_argument("--next", required=True, help="what the launcher runs: 'sccache NVCC' or NVCC")
    parser.add_argument("--root", type=Path, help="default: $WF_CACHE_DIR/cuda-homes, else $TMPDIR/wf-cuda-homes")
    args = parser.parse_args(argv)
    cache = os.environ.get("WF_CACHE_DIR")
    default = Path(cache) / "cuda-homes" if cache else Path(os.environ.get("TMPDIR") or "/tmp") / "wf-cuda-homes"
    print(make(args.cuda_home, args.python, args.next, args.root or default))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
