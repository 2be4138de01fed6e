"""The Docker test bed's CUDA builder image, for the container-mode CUDA tests.

    python3 tools/docker_testbed_cuda.py [--cuda 13.0] [--requirement LINE ...]   # build or reuse; print the tag

``wf-testbed/cuda-builder`` is built FROM the test builder (tools/docker_testbed.py) by
tools/testbed/cuda-builder.Dockerfile: the production install_cuda.sh, offline, with the lock's wheels
(the compiler parts and the libraries the job's ``CUDA_REQUIREMENTS`` name) and a CUDA torch's wheels
(tools/testbed/wheelhouse-cu130-requirements.txt) in its wheelhouse. Every wheel is fetched on the host by
``pip download --require-hashes`` into the test bed's cache and kept there; the tag is a hash of the builder
tag, the Dockerfile, the CUDA lock, the requirements and the wheelhouse list.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "buildspecs"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools import docker_testbed as bed
from wfbuild.cuda.toolkit import installer  # the production lock reader (install_cuda.py), as host mode uses it

BUNDLE = bed.ROOT / "buildspecs"

CUDA_WHEELS = bed.TESTBED / "wheelhouse-cu130-requirements.txt"
DOCKERFILE = bed.TESTBED / "cuda-builder.Dockerfile"


def toolkit_requirements(cuda: str, requirements: list[str]) -> str:
    """The lock's wheels for this toolkit as hash-pinned requirement lines (what install_cuda.py downloads)."""
    tool = installer(BUNDLE)
    wheels, missing = tool.select(tool.load_lock(cuda, "x86_64"), requirements)
    if missing:
        raise tool.LockError(f"CUDA {cuda}: the lock holds no wheels for {'; '.join(missing)}")
    return "".join(f"{w['name']}=={w['version']} --hash=sha256:{w['sha256']}\n" for w in wheels)


def cuda_builder_tag(cuda: str, requirements: list[str]) -> str:
    lock = installer(BUNDLE).lock_path(cuda, "x86_64")
    parts = [bed.builder_tag().encode(), DOCKERFILE.read_bytes(), lock.read_bytes(), CUDA_WHEELS.read_bytes()]
    parts.append("\n".join(sorted(requirements)).encode())
    return f"wf-testbed/cuda-builder:{bed._digest(*parts)}"


def build_cuda_builder(cuda: str = "13.0", requirements: list[str] | None = None) -> str:
    """The CUDA builder image for (cuda, the job's CUDA_REQUIREMENTS lines), unless it exists."""
    requirements = list(requirements or [])
    tag = cuda_builder_tag(cuda, requirements)
    if bed._exists(tag):
        return tag
    base = bed.build_builder()
    wheels = bed.CACHE / "cuda-wheelhouse"
    wheels.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=bed.CACHE) as tmp:
        context = Path(tmp)
        pinned = context / "toolkit-requirements.txt"
        pinned.write_text(toolkit_requirements(cuda, requirements))
        for listing in (pinned, CUDA_WHEELS):
            bed.download(listing, wheels)
        (context / "wheelhouse").mkdir()
        for wheel in wheels.glob("*.whl"):  # hard links: the context is the cache's own files, not copies
            os.link(wheel, context / "wheelhouse" / wheel.name)
        argv = ["build", "--quiet", "--network", "none", "-f", str(DOCKERFILE), "--build-arg", f"BASE_IMAGE={base}"]
        lines = "\n".join(requirements)
        argv += ["--build-arg", f"CUDA_VERSION={cuda}", "--build-arg", f"CUDA_REQUIREMENTS={lines}"]
        bed.docker(*argv, "-t", tag, str(context))
    return tag


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="docker_testbed_cuda.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuda", default="13.0")
    parser.add_argument("--requirement", action="append", default=[], help="a CUDA_REQUIREMENTS line of the job")
    args = parser.parse_args(argv)
    problem = bed.engine_problem()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    print(build_cuda_builder(args.cuda, args.requirement))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
