"""Host mode's CUDA toolkit: the builder image's own lock, installed into the cache instead of an image.

In container mode the builder image assembles CUDA_HOME from ``images/scripts/cuda/cuda-<X.Y>-<platform>
.toml`` (install_cuda.py, at image build). In host mode (local runs, the embedded AWS, CodeBuild with
``WF_CONTAINER=none``) the runner installs the same lock, with the job's same ``CUDA_REQUIREMENTS``
build argument, under ``$WF_CACHE_DIR/toolkits/`` (once per machine; a file lock keeps concurrent jobs
from racing) or in the job's work dir. The stages then see only that toolkit: CUDA_HOME and CUDACXX
point at it and its bin/ leads PATH, and the other variables CMake or torch.utils.cpp_extension read to find
a toolkit are dropped, so one the machine happens to have (/usr/local/cuda, an nvcc on PATH) is never used.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from wfbuild.cuda import stack_lock
from wfbuild.envs import locked

CUDA_VARIABLES = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "CUDA_TOOLKIT_ROOT_DIR", "CUDACXX", "CUDA_BIN_PATH")


def installer(bundle: Path) -> ModuleType:
    """The bundle's install_cuda.py: the one reader of the locks (the image build runs the same file)."""
    path = bundle / "images" / "scripts" / "install_cuda.py"
    spec = importlib.util.spec_from_file_location("wf_install_cuda", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"no install_cuda.py in {path.parent}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def requirements_of(job: Mapping[str, Any]) -> list[str]:
    args = job.get("image", {}).get("build_args", {})
    return [line for line in str(args.get("CUDA_REQUIREMENTS", "")).splitlines() if line.strip()]


def prefix_for(
    bundle: Path, cuda: str, platform: str, requirements: list[str], root: Path, locks: Path | None = None
) -> Path:
    """Where (cuda, platform, requirements) is installed under ``root``: keyed by the lock's bytes and by
    the installer's LAYOUT, so a toolkit made before the installer added something (the driver stub) is
    never reused as if it had it."""
    tool = installer(bundle)
    # locks: a stack lock's folder (wfbuild.cuda.stack_lock), else the bundle's
    lock = tool.lock_path(cuda, platform, locks)
    if not lock.is_file():
        tool.load_lock(cuda, platform, locks)  # raises the LockError naming what is locked
    layout = f"\nlayout {tool.LAYOUT}".encode()
    key = hashlib.sha256(lock.read_bytes() + "\n".join(sorted(requirements)).encode() + layout).hexdigest()[:16]
    return root / "toolkits" / f"cuda{cuda}-{platform}-{key}"


def ensure(
    bundle: Path, cuda: str, platform: str, requirements: list[str], root: Path, locks: Path | None = None
) -> Path:
    """CUDA_HOME for (cuda, platform, requirements), installed under ``root`` unless already there."""
    tool = installer(bundle)
    prefix = prefix_for(bundle, cuda, platform, requirements, root, locks)
    with locked(root / "toolkits" / f"{prefix.name}.lock"):
        if (prefix / tool.MARKER).is_file():
            print(f"reusing CUDA {cuda} toolkit {prefix}", flush=True)
            return prefix
        if prefix.exists():  # a half-built one left by a killed job
            shutil.rmtree(prefix)
        tool.install(cuda, platform, prefix, requirements, locks)
    return prefix


def stage_env(env: Mapping[str, str], cuda_home: Path) -> dict[str, str]:
    """A stage's environment seeing only ``cuda_home``'s CUDA."""
    out = {k: v for k, v in env.items() if k not in CUDA_VARIABLES}
    out["CUDA_HOME"] = str(cuda_home)
    out["CUDACXX"] = str(cuda_home / "bin" / "nvcc")
    out["PATH"] = os.pathsep.join([str(cuda_home / "bin"), env.get("PATH", "/usr/bin:/bin")])
    out["LIBRARY_PATH"] = link_path(cuda_home, env.get("LIBRARY_PATH", ""))
    return out


def link_path(cuda_home: Path | str, current: str = "") -> str:
    """LIBRARY_PATH with the toolkit's driver stubs last: ``-lcuda`` links where no driver is installed.

    nvcc's own link adds lib64/stubs (nvcc.profile), but torch.utils.cpp_extension links a CUDAExtension
    with the host compiler and gives it only ``-L<CUDA_HOME>/lib64``. gcc reads LIBRARY_PATH at link time
    only, after every -L: the binary still names ``libcuda.so.1``, the user's driver, never the stub. Never
    LD_LIBRARY_PATH: that is read at run time, where a stub would stand in for the driver.
    """
    stubs = os.path.join(str(cuda_home), "lib64", "stubs")
    entries = [e for e in current.split(os.pathsep) if e and e != stubs]
    return os.pathsep.join([*entries, stubs])


def without_cuda(env: Mapping[str, str]) -> dict[str, str]:
    """A host-mode stage of a job without a toolkit sees no CUDA at all (never the machine's).

    A CPU cell whose setup.py builds CUDA code when it finds nvcc (torchsort's does) would otherwise
    compile against whatever toolkit this host happens to have, and fail or mislabel the wheel.
    """
    out = {k: v for k, v in env.items() if k not in CUDA_VARIABLES}
    path = env.get("PATH", "/usr/bin:/bin").split(os.pathsep)
    out["PATH"] = os.pathsep.join(p for p in path if p and not os.access(os.path.join(p, "nvcc"), os.X_OK))
    return out


def describe(cuda_home: Path) -> str:
    record = json.loads((cuda_home / "wf-toolkit.json").read_text(encoding="utf-8"))
    return f"CUDA {record['cuda']} ({record['platform']}, release {record['release']}): {len(record['wheels'])} wheels"


def main(argv: list[str] | None = None) -> int:
    """``python -m wfbuild.cuda.toolkit --job JOB_JSON --root DIR``: the runner's host-mode toolkit stage."""
    parser = argparse.ArgumentParser(prog="python -m wfbuild.cuda.toolkit", description=main.__doc__)
    parser.add_argument("--job", required=True, type=Path, help="the job's job.json")
    parser.add_argument("--root", required=True, type=Path, help="the cache (or work) dir to install under")
    args = parser.parse_args(argv)
    job = json.loads(args.job.read_text(encoding="utf-8"))
    bundle = Path(__file__).resolve().parents[2]
    cuda = str(job["image"]["build_args"]["CUDA_VERSION"])
    try:
        locks = stack_lock.fetch(stack_lock.s3_get, job["run"]["bucket"], job, cuda, job["platform"], args.root)
        home = ensure(bundle, cuda, job["platform"], requirements_of(job), args.root, locks)
    except Exception as exc:  # the lock's own error (LockError), a download or pip failure: one line
        print(f"wfbuild.cuda.toolkit: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"toolkit ready: {describe(home)} in {home}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
