"""A ninja build of several .cu files under the job's compiler cache: every nvcc asks for the cell's cores
as threads, the cache server's pool keeps the compilers at once within the cores, and the file left last
compiles its architectures side by side.

sccache 0.16 spawns every compiler process (nvcc's cicc and ptxas per architecture, cudafe++, the host
compiler) with a token of its server's pool, one per core (mozilla/sccache@v0.16.0:src/mock_command.rs,
``AsyncCommand::spawn``). Before this, the runner gave a cell of 3 .cu files on 2 cores one thread each
(processes x threads = cores without a pool), so causal-conv1d's hour-long ``causal_conv1d_bwd.cu``
compiled its 9 architectures one after another on one core while the other sat idle.

The source is tests/fixtures/pyg_cuda_ext built with ninja, its ``shift`` extension given a third .cu file
whose device code takes a while (the build's tail). The runner runs in host mode on 2 of this host's cores
against moto (tests/buildspecs/test_runner.py's harness), with the job's compiler cache on the stack's
bucket, once, with its own choice of threads. That nvcc's thread count leaves a wheel's bytes alone is
test_nvcc_threads.py's to show (--threads 1 and 2 in one folder; one core and two in two folders); the pool
only decides when each compiler starts. This test once built a --threads 1 reference beside the pooled
build too: 420 s of the gate for what those tests already hold.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from pathlib import Path

import pytest

from tests.buildspecs.test_nvcc_threads import _build, _put_job, _stat, two_cores
from tests.buildspecs.test_runner import Aws, moto_endpoint  # noqa: F401

pytestmark = pytest.mark.heavy  # a real CUDA build: `make test-heavy` (.ci/heavy), not `make test`

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "pyg_cuda_ext"
COMPILERS = ("cicc", "ptxas", "cc1plus", "cudafe++")  # what the pool's tokens are spent on
HEAVY = """// Device code that takes a while for each architecture: the file left compiling at the build's end.
#include <utility>

template <int N>
__global__ void wf_poly(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
#pragma unroll
    for (int k = 0; k < 4 * N; ++k) v = v * 1.0001f + static_cast<float>(k % 7) * v;
    x[i] = v;
  }
}

template <int... Ns>
static void wf_launch_all(float* x, int n, std::integer_sequence<int, Ns...>) {
  (wf_poly<Ns + 1><<<1, 32>>>(x, n), ...);
}

void wf_heavy(float* x, int n) { wf_launch_all(x, n, std::make_integer_sequence<int, 450>{}); }
"""


class PoolSampler(threading.Thread):
    """Every 20 ms: this job's compiler processes (its cache server's children carry the job's SCCACHE_DIR)
    at once, and the most cicc of one .cu file at once (nvcc passes the file as --orig_src_file_name); for
    TAIL, each moment's (time, tokens held, TAIL's cicc) and when each of TAIL's cicc (one per architecture)
    began. A token is held by each process the server spawned (its direct children: cicc, ptxas, fatbinary,
    cudafe++, the host compiler's driver, whose cc1plus and ``as`` hold no token of their own)."""

    def __init__(self, work: Path) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.root = ""  # set by _build; the server is not the runner's child (sccache daemonizes it)
        self.mark = f"SCCACHE_DIR={work}".encode()  # the server's folder is under the job's
        self.most_at_once = 0
        self.cicc_per_file: dict[str, int] = {}
        self.moments: list[tuple[float, int, frozenset[str]]] = []
        self.began: dict[str, float] = {}  # pid of one of TAIL's cicc -> first seen

    def run(self) -> None:
        while not self.stop.wait(0.02):
            running, held, per_file, tail = 0, 0, dict[str, int](), set[str]()
            procs = {pid: s for pid in filter(str.isdigit, os.listdir("/proc")) if (s := _stat(pid))}
            for pid, (comm, ppid) in procs.items():
                spawned = procs.get(ppid, ("", ""))[0] == "sccache" and comm != "sccache"
                if comm not in COMPILERS and not spawned:
                    continue
                try:
                    if self.mark not in Path(f"/proc/{pid}/environ").read_bytes():
                        continue
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue  # gone, or not ours to read
                held += spawned
                if comm not in COMPILERS:
                    continue
                running += 1
                if comm == "cicc" and b"--orig_src_file_name" in argv[:-1]:
                    name = Path(argv[argv.index(b"--orig_src_file_name") + 1].decode()).name
                    per_file[name] = per_file.get(name, 0) + 1
                    if name == TAIL:
                        tail.add(pid)
            now = time.monotonic()
            for pid in tail:
                self.began.setdefault(pid, now)
            self.moments.append((now, held, frozenset(tail)))
            self.most_at_once = max(self.most_at_once, running)
            for name, count in per_file.items():
                self.cicc_per_file[name] = max(self.cicc_per_file.get(name, 0), count)


TAIL = "heavy_cuda.cu"
ARCHS = 2  # the request's arch_list 8.0;9.0 (tests/buildspecs/test_nvcc_threads.py): one cicc each


def free_token_waits(sampler: PoolSampler, tokens: int) -> list[tuple[float, float]]:
    """Spans (start, end) in which one of TAIL's cicc ran, another had not begun, and fewer than ``tokens``
    (the pool's, one per core) were held: a free token that TAIL's waiting architecture did not take."""
    spans: list[tuple[float, float]] = []
    start = None
    for now, held, ciccs in sampler.moments:
        waiting = len(ciccs) == 1 and any(began > now for began in sampler.began.values())
        if waiting and held < tokens:
            start = now if start is None else start
        elif start is not None:
            spans.append((start, now))
            start = None
    return spans


def _ninja_source(root: Path) -> Path:
    """The fixture with ninja and the tail file, its .cpp files renamed ``<op>.cpp``: setuptools sorts the
    sources, so ninja starts them in the order this test was measured with (heavy_cuda.cu, shift.cpp,
    shift_cuda.cu), and the tail file outlasts the others."""
    source = root / "src"
    shutil.copytree(FIXTURE, source)
    (source / "csrc" / "heavy_cuda.cu").write_text(HEAVY)
    for op in ("scale", "shift"):
        (source / "csrc" / f"{op}_ops.cpp").rename(source / "csrc" / f"{op}.cpp")
    setup = source / "setup.py"
    text = setup.read_text()
    sources = 'sources = [f"csrc/{name}_ops.cpp"] + ([f"csrc/{name}_cuda.cu"] if cuda else [])'
    assert sources in text and "use_ninja=False" in text
    heavy = 'sources += ["csrc/heavy_cuda.cu"] if cuda and name == "shift" else []'
    sources_here = sources.replace("_ops.cpp", ".cpp")
    text = text.replace(sources, f"{sources_here}\n    {heavy}").replace("use_ninja=False", "use_ninja=True")
    setup.write_text(text)
    return source


@pytest.mark.timeout(3000)
def test_a_ninja_cells_cuda_files_share_the_compiler_caches_pool_and_the_last_compiles_its_architectures_at_once(
    moto_endpoint: str,  # noqa: F811
    cache_dir: Path,
    tmp_path: Path,
) -> None:
    cores, work = two_cores(), tmp_path / "work"  # MEMORY (the job's env): the pool's split on any host
    aws = Aws(moto_endpoint, "ca-central-1")
    job = _put_job(aws, tmp_path, _ninja_source(tmp_path), "wf-pyg-cuda", cached=True)
    pooled, sampler = _build(aws, job, work, cache_dir, None, cores, PoolSampler(work))
    log = aws.text(pooled["log_key"])
    assert "compiler cache: sccache" in log and "3 .cu file(s) in the source" in log, log[-3000:]
    cache = json.loads(aws.text(pooled["manifest_key"]))["compiler_cache"]
    assert cache["hits"] == 0 and cache["misses"] >= 3, f"a fresh stack's cache: each unit compiled, {cache}"
    pool = "the compiler cache's pool keeps the compilers at once within the 2 cores"
    assert re.search(rf"MAX_JOBS=2 each, nvcc --threads 2 \({pool}\)", log), log[-3000:]
    # the pool at work: never more compilers than cores, though 2 nvcc x 2 threads could run 4 cicc
    assert 0 < sampler.most_at_once <= 2, f"{sampler.most_at_once} compilers at once on 2 cores"
    # ... and the tail file's nvcc (--threads 2) had its architectures take the pool's tokens as they came free:
    # never one of them waiting while a token stood free (2 s: beyond a spawn's latency on a busy host). When
    # both run at once is the pool's timing (the other units' lengths), so that is not asserted; where the tail
    # file was left alone with both to compile, this rule is what makes them run at once.
    assert len(sampler.began) == ARCHS, f"{len(sampler.began)} cicc of {TAIL} seen, {sampler.cicc_per_file}"
    waits = [(a, b) for a, b in free_token_waits(sampler, len(cores)) if b - a >= 2.0]
    assert not waits, f"{TAIL}'s second architecture waited with a token free: {waits}, {sampler.cicc_per_file}"
    (wheel,) = pooled["wheels"]
    assert "cu130" in wheel["filename"] and len(wheel["sha256"]) == 64, wheel
