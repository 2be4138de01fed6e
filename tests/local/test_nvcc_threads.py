"""A multi-architecture CUDA cell compiles its architectures side by side (nvcc --threads, through
NVCC_APPEND_FLAGS) and its wheel is byte-identical to one built with --threads 1.

Two `wheelfoundry local run`s of examples/extension for CUDA 13.0 with two architectures (the toolkit
from the repository's lock, buildspecs/images/scripts/cuda/cuda-13.0-x86_64.toml, installed under
WF_CACHE_DIR by the runner; no system CUDA on PATH). While they build, a sampler reads /proc: every nvcc
process, the NVCC_APPEND_FLAGS it was started with, and how many of its cicc/ptxas (one per architecture)
ran at the same moment.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEVICE_TOOLS = ("cicc", "ptxas")
REQUEST = {
    "framework": "extension",
    "name": "wf-example-ops",
    "source": {"s3": "s3://replaced-by-local-run/sources/wf-example-ops.tar.gz"},
    "torch": ["2.14"],
    "cuda": ["13.0"],
    "python": ["3.11"],
    "platforms": ["x86_64"],
    "arch_list": "8.0;9.0",
    "torch_index": "pip",
    "channel": "demo",
}


def _stat(pid: str) -> tuple[str, str] | None:
    """(comm, ppid) of a process, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = text[text.index("(") + 1 : text.rindex(")")]
    return comm, text[text.rindex(")") + 2 :].split()[1]


class NvccSampler(threading.Thread):
    """Samples /proc: nvcc processes' NVCC_APPEND_FLAGS and the most device compiles one nvcc ran at once."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.flags: set[str] = set()
        self.most_at_once = 0
        self.nvcc_seen = 0

    def run(self) -> None:
        seen: set[str] = set()
        while not self.stop.wait(0.02):
            procs = {pid: s for pid in os.listdir("/proc") if pid.isdigit() and (s := _stat(pid))}
            per_nvcc: dict[str, int] = {}
            for pid, (comm, _) in procs.items():
                if comm == "nvcc" and pid not in seen:
                    seen.add(pid)
                    self._read_flags(pid)
                if comm in DEVICE_TOOLS and (owner := self._nvcc_of(pid, procs)):
                    per_nvcc[owner] = per_nvcc.get(owner, 0) + 1
            self.most_at_once = max([self.most_at_once, *per_nvcc.values()])
        self.nvcc_seen = len(seen)

    def _read_flags(self, pid: str) -> None:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            return
        for item in environ:
            if item.startswith(b"NVCC_APPEND_FLAGS="):
                self.flags.add(item.split(b"=", 1)[1].decode())

    @staticmethod
    def _nvcc_of(pid: str, procs: dict[str, tuple[str, str]]) -> str | None:
        for _ in range(6):  # nvcc -> (sh) -> cicc / ptxas
            parent = procs.get(pid, ("", ""))[1]
            if parent not in procs:
                return None
            if procs[parent][0] == "nvcc":
                return parent
            pid = parent
        return None


def _local_run(tmp: Path, threads: int) -> tuple[Path, NvccSampler]:
    tmp.mkdir(parents=True)
    request = tmp / "request.json"
    request.write_text(json.dumps(REQUEST))
    path = [p for p in os.environ["PATH"].split(os.pathsep) if p and not (Path(p) / "nvcc").exists()]
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "CUDACXX")}
    env |= {"PATH": os.pathsep.join(path), "WF_NVCC_THREADS": str(threads)}
    argv = [sys.executable, "-m", "wheelfoundry_cli.main", "local", "run", str(request)]
    sampler = NvccSampler()
    sampler.start()
    try:
        done = subprocess.run(
            [*argv, "--source", str(ROOT / "examples" / "extension")],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
        )
    finally:
        sampler.stop.set()
        sampler.join()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("*.whl")
    return wheel, sampler


@pytest.mark.timeout(3000)
def test_two_arch_cuda_cell_compiles_architectures_in_parallel_and_gives_the_same_wheel(tmp_path: Path) -> None:
    serial, one = _local_run(tmp_path / "threads1", 1)
    parallel, two = _local_run(tmp_path / "threads2", 2)
    # --threads 1: nothing appended, one architecture at a time
    assert one.nvcc_seen >= 1 and not any("--threads" in f for f in one.flags), one.flags
    assert one.most_at_once == 1
    # --threads 2: every nvcc started with it, and it ran both architectures' device compiles at once
    assert two.nvcc_seen >= 1 and two.flags and all("--threads 2" in f for f in two.flags), two.flags
    assert all("-ffile-prefix-map=" in f for f in two.flags)  # the reproducibility flags are kept
    assert two.most_at_once == 2, f"at most {two.most_at_once} cicc/ptxas of one nvcc at a time"
    assert serial.name == parallel.name
    digests = {hashlib.sha256(w.read_bytes()).hexdigest() for w in (serial, parallel)}
    assert len(digests) == 1, f"{serial.name}: --threads 1 and --threads 2 give different wheels: {digests}"

