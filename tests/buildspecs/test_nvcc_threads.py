"""A multi-architecture CUDA cell compiles its architectures side by side (nvcc --threads, through
NVCC_APPEND_FLAGS) and its wheel is byte-identical to one built with --threads 1.

The runner in host mode against moto (tests/buildspecs/test_runner.py's harness) builds examples/extension
for CUDA 13.0 with two architectures, twice, in the same work folder: WF_NVCC_THREADS=1, then the runner's
own choice (MAX_JOBS the cores and 2 threads for the one .cu file). The CUDA
toolkit comes from the repository's lock (buildspecs/images/scripts/cuda/cuda-13.0-x86_64.toml), installed
under WF_CACHE_DIR by the runner, with no system CUDA on PATH. While each builds, a sampler reads /proc:
every nvcc that compiles a .cu file (not a probe such as ``nvcc --version``, nor nvcc's own fork caught
before it execs a step), the NVCC_APPEND_FLAGS it was started with, and how many of its cicc/ptxas (one
per architecture) ran at the same moment.

The two-architecture test builds twice in one folder, so only the thread count differs. Plain nvcc names
each file's anonymous namespace after a hash of the source's absolute path (``_GLOBAL__N__<hash>_...``);
the PyG-layout test builds in two folders, which the job's nvcc launcher makes give the same bytes
(docs/provenance.md).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.buildspecs.conftest import example_source
from tests.buildspecs.test_runner import Aws, moto_endpoint, runner_env, tarball  # noqa: F401
from wfbuild import hostinfo
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request

pytestmark = pytest.mark.heavy  # several real builds: `make test-heavy` (.ci/heavy), not `make test`

DEVICE_TOOLS = ("cicc", "ptxas")
REQUEST = {
    "framework": "extension",
    "name": "wf-example-ops",
    "torch": ["2.14"],
    "cuda": ["13.0"],
    "python": ["3.11"],
    "platforms": ["x86_64"],
    "arch_list": "8.0;9.0",
    "torch_index": "pip",  # this host's pip configuration: torch 2.14.1 (CUDA 13.0) from PyPI
}
# The memory inputs of the runner's split (wfbuild.compiling.parallelism.cell_slots), fixed in the job's env: with the
# plan's 4 GiB per compiler and 4 GiB reserve, memory is the limit below 13 GiB (2 cores of 8 GiB rightly get
# MAX_JOBS=1, no threads), so the split these tests prove would be the host's, not the rule's. At these, 2
# pinned cores give the same split on any host of MIN_GIB: cell_slots(2, MIN_GIB - 1, 2, 1, ...) = MAX_JOBS=2,
# --threads 2 for one .cu file (2 x 2 + 1 <= 5 GiB), the pool's threads (2 GiB x 2 cores <= 5 GiB). The
# builds themselves (a fixture's few small units, 2 compilers at once) hold far less.
MEMORY = {"WF_RESERVE_GIB": "1.0", "WF_GIB_PER_COMPILE_JOB": "2.0", "WF_GIB_PER_NVCC_THREAD": "1.0"}
MIN_GIB = 6.0


def two_cores() -> set[int]:
    """Two of this host's cores, for a runner pinned to them (its split then is the same on any host)."""
    cores = sorted(os.sched_getaffinity(0))
    assert len(cores) >= 2, "this test needs 2 cores"
    memory = hostinfo.memory_gib()
    assert memory >= MIN_GIB, f"this test needs {MIN_GIB:g} GiB of memory (MEMORY's split); this host has {memory:.1f}"
    return set(cores[:2])


def _stat(pid: str) -> tuple[str, str] | None:
    """(comm, ppid) of a process, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = text[text.index("(") + 1 : text.rindex(")")]
    return comm, text[text.rindex(")") + 2 :].split()[1]


def _sources(pid: str, suffixes: tuple[bytes, ...]) -> set[str]:
    """The source files a compiler process names on its command line."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return set()
    return {Path(a.decode()).name for a in argv if a.endswith(suffixes)}


class NvccSampler(threading.Thread):
    """Samples /proc: nvcc processes' NVCC_APPEND_FLAGS and the most device compiles one nvcc ran at once."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.flags: set[str] = set()
        self.most_at_once = 0
        self.most_cu_at_once = 0  # the most .cu files being compiled at one moment
        self._cu_of: dict[str, set[str]] = {}  # nvcc pid -> the .cu files it compiles
        self._cpp_of: dict[str, set[str]] = {}  # cc1plus pid -> the C++ files it compiles
        self.spans: dict[str, tuple[float, float]] = {}  # source file -> (first, last) moment a compiler had it
        self.root = ""  # the runner's pid: only its descendants count (other builds may share this host)

    @property
    def cu_files(self) -> set[str]:
        """The .cu files the nvcc processes compiled (a probe such as ``nvcc --version``: none)."""
        return set().union(*self._cu_of.values())

    def run(self) -> None:
        seen: set[str] = set()
        while not self.stop.wait(0.02):
            procs = {pid: s for pid in os.listdir("/proc") if pid.isdigit() and (s := _stat(pid))}
            per_nvcc: dict[str, int] = {}
            for pid, (comm, ppid) in procs.items():
                # an nvcc's own fork, caught before it execs a step, is also "nvcc": the parent counts
                fork = procs.get(ppid, ("", ""))[0] == "nvcc"
                if comm == "nvcc" and pid not in seen and not fork and self._under_root(pid, procs):
                    seen.add(pid)
                    self._read_compile(pid)
                if comm in DEVICE_TOOLS and (owner := self._nvcc_of(pid, procs)) and owner in seen:
                    per_nvcc[owner] = per_nvcc.get(owner, 0) + 1
                if comm == "cc1plus" and pid not in self._cpp_of and self._under_root(pid, procs):
                    self._cpp_of[pid] = _sources(pid, (b".cpp", b".cc"))
            self.most_at_once = max([self.most_at_once, *per_nvcc.values()])
            alive = set().union(*(files for pid, files in self._cu_of.items() if pid in procs))
            self.most_cu_at_once = max(self.most_cu_at_once, len(alive))
            now = time.monotonic()
            for name in alive.union(*(files for pid, files in self._cpp_of.items() if pid in procs)):
                self.spans[name] = (self.spans.get(name, (now, now))[0], now)

    def overlapped(self, first: str, second: str) -> bool:
        """Whether the compiles of the files starting ``first`` and those starting ``second`` (two extensions'
        chains) ran at one moment: both had begun before either had ended."""
        a = [s for f, s in self.spans.items() if f.startswith(first)]
        b = [s for f, s in self.spans.items() if f.startswith(second)]
        if not a or not b:
            return False
        return max(min(s for s, _ in a), min(s for s, _ in b)) < min(max(e for _, e in a), max(e for _, e in b))

    def _read_compile(self, pid: str) -> None:
        """The .cu file an nvcc compiles and the NVCC_APPEND_FLAGS it started with (a probe such as torch's
        ``nvcc --version`` compiles none and runs with the build's flags, not a compile step's)."""
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            return
        sources = {Path(a.decode()).name for a in argv if a.endswith(b".cu")}
        if not sources:
            return
        self._cu_of[pid] = sources
        for item in environ:
            if item.startswith(b"NVCC_APPEND_FLAGS="):
                self.flags.add(item.split(b"=", 1)[1].decode())

    def _under_root(self, pid: str, procs: dict[str, tuple[str, str]]) -> bool:
        for _ in range(40):
            if pid == self.root:
                return True
            if pid not in procs:
                return False
            pid = procs[pid][1]
        return False

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


def _put_job(
    aws: Aws, tmp: Path, source: Path | None = None, name: str = "wf-example-ops", cached: bool = False
) -> str:
    """The job's contract in ``aws``; ``cached``: its compiler cache on that stack's bucket (as a deployed
    stack's jobs have it), else on the planner's placeholder bucket, which the runner leaves alone."""
    key = f"sources/{name}.tar.gz"
    tree = source or example_source(tmp / "src")
    aws.s3.put_object(Bucket=aws.bucket, Key=key, Body=tarball(tree, f"{name}-0.1.0"))
    request = {**REQUEST, "name": name, "source": {"s3": f"s3://{aws.bucket}/{key}"}}
    (job,) = plan_request(parse_request(request), load_catalog(), load_config()).jobs
    contract = job.to_dict()
    if cached:
        contract["env"] |= {"SCCACHE_BUCKET": aws.bucket, "SCCACHE_REGION": aws.region}
    contract["env"] |= MEMORY  # the split is the rule's, not this host's memory's
    prefix = f"runs/run-1/jobs/{job.id}/"
    contract["run"] = {"id": "run-1", "bucket": aws.bucket, "prefix": prefix, "channel": "dev", "ecr_repository": "",
                       "region": aws.region}  # fmt: skip
    if cached:  # the stages' own session (wfbuild.runner.credentials), which the cache server reads the bucket with
        contract["run"]["job_role_arn"] = "arn:aws:iam::123456789012:role/wf-test-job"
    aws.s3.put_object(Bucket=aws.bucket, Key=f"{prefix}job.json", Body=json.dumps(contract).encode())
    return f"{prefix}job.json"


def _build(
    aws: Aws,
    job_key: str,
    work: Path,
    cache: Path,
    threads: int | None,
    cpus: set[int] | None = None,
    sampler: Any = None,
) -> tuple[dict[str, Any], Any]:
    """One build; ``threads`` None: the runner's own choice (wfbuild.compiling.parallelism.cell_slots); ``cpus``: the
    runner's CPU affinity (the cores it sees), else this host's; ``sampler``: an NvccSampler's stand-in
    (a thread with ``root`` and ``stop``)."""
    execution, token = aws.task_token()
    path = [p for p in os.environ["PATH"].split(os.pathsep) if p and not (Path(p) / "nvcc").exists()]
    pinned = {"WF_NVCC_THREADS": str(threads)} if threads else {}
    env = runner_env(aws, job_key, token, work, cache, PATH=os.pathsep.join(path), **pinned)
    for name in ("CUDA_HOME", "CUDA_PATH", "CUDACXX"):
        env.pop(name, None)
    sampler = sampler or NvccSampler()
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    argv = [sys.executable, "-m", "wfbuild.runner.runner"]
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True, preexec_fn=pin) as proc:
        sampler.root = str(proc.pid)
        sampler.start()
        try:
            out, _ = proc.communicate(timeout=2400)
        finally:
            sampler.stop.set()
            sampler.join()
    assert proc.returncode == 0, out[-4000:]
    output = json.loads(aws.finished(execution)["output"])
    return output, sampler


@pytest.mark.timeout(3000)
def test_two_arch_cuda_cell_compiles_architectures_in_parallel_and_gives_the_same_wheel(
    moto_endpoint: str,  # noqa: F811
    cache_dir: Path,
    tmp_path: Path,
) -> None:
    """The example's setup.py given ``--threads 4`` in its own nvcc flags, as causal-conv1d 1.7.0's and
    fast-hadamard-transform 1.1.0's have: that would run 4 architectures at once on each of MAX_JOBS
    compilers whatever the cell's cores and memory. The runner's ``--threads`` ends nvcc's command line and
    nvcc keeps the last, so the cell pinned to one thread compiles one architecture at a time."""
    source = example_source(tmp_path / "src")
    setup = source / "setup.py"
    text = setup.read_text()
    assert '"nvcc": ["-O2"]' in text
    setup.write_text(text.replace('"nvcc": ["-O2"]', '"nvcc": ["-O2", "--threads", "4"]'))
    work = tmp_path / "work"  # both builds here (removed after each success)
    cores = two_cores()  # both builds on 2 cores: the second's split is MAX_JOBS=2, --threads 2 on any host
    # a region (stack) per build: moto's Step Functions fails a second execution started in one region here
    first_aws, second_aws = Aws(moto_endpoint, "us-west-1"), Aws(moto_endpoint, "eu-west-3")
    serial, one = _build(first_aws, _put_job(first_aws, tmp_path / "one", source), work, cache_dir, 1, cores)
    (first,) = serial["wheels"]
    parallel, two = _build(second_aws, _put_job(second_aws, tmp_path / "two", source), work, cache_dir, None, cores)
    (second,) = parallel["wheels"]
    aws = second_aws
    # --threads 1, said on the command line (it ends it, so the package's own 4 gives way): one at a time
    assert one.cu_files == {"ops_cuda.cu"} and one.flags and all("--threads 1" in f for f in one.flags), one.flags
    assert one.most_at_once == 1
    # --threads 2 (2 pinned cores, MEMORY: cell_slots' split on any host): every nvcc started with it, and it ran
    # both architectures' device compiles at once (nvcc starts both threads together; each cicc lasts seconds)
    assert two.cu_files == {"ops_cuda.cu"} and two.flags and all("--threads 2" in f for f in two.flags), two.flags
    assert all("-ffile-prefix-map=" in f and "-objtemp" in f for f in one.flags | two.flags)  # reproducibility
    assert two.most_at_once == 2, f"at most {two.most_at_once} cicc/ptxas of one nvcc at a time"
    log = aws.text(parallel["log_key"])
    # The runner's own choice: one .cu file (beside ops.cpp), so MAX_JOBS keeps the cores and nvcc gets threads
    assert "1 .cu file(s) in the source: nvcc threads take the cores they leave" in log
    # MAX_JOBS keeps both pinned cores (the .cpp compiles beside the .cu): cell_slots' rule for these inputs
    assert "1 cell(s), 1 at a time, MAX_JOBS=2 each, nvcc --threads 2" in log, log[-3000:]
    manifest = json.loads(aws.text(parallel["manifest_key"]))
    assert manifest["parallelism"]["nvcc_threads"] == 2 and manifest["parallelism"]["cells_at_once"] == 1
    assert first["filename"] == second["filename"] and "cu130" in first["filename"]
    assert first["sha256"] == second["sha256"], f"{first['filename']}: --threads 1 and 2 give different wheels"
    body = aws.s3.get_object(Bucket=aws.bucket, Key=second["key"])["Body"].read()
    assert hashlib.sha256(body).hexdigest() == second["sha256"]


@pytest.mark.timeout(3000)
def test_a_pyg_layout_cells_extensions_compile_side_by_side_and_give_the_serial_builds_wheel(
    moto_endpoint: str,  # noqa: F811
    cache_dir: Path,
    tmp_path: Path,
) -> None:
    """Two extensions, each of one .cpp and one .cu file, built without ninja (tests/fixtures/pyg_cuda_ext,
    torch-scatter's layout): on one core the cell builds them one after the other; on 2 cores they share no
    object file, so wfbuild.compiling.parallel_compile builds them side by side (each extension's chain at once, one
    nvcc thread each: processes x threads = cores), and the wheel is the serial build's.

    Each build in a folder of its own (as two instances have): without ninja torch runs $CUDA_HOME/bin/nvcc
    itself, not PYTORCH_NVCC, so only wfbuild.compiling.cuda_home's shim brings the launcher that keeps the source's
    path out of its anonymous namespace's name (``_GLOBAL__N__<hash of the path>``) and the objects."""
    cores = sorted(two_cores())  # MEMORY: on 2 cores MAX_JOBS=2 on any host, as on 1 core MAX_JOBS=1
    first_aws, second_aws = Aws(moto_endpoint, "us-west-2"), Aws(moto_endpoint, "eu-west-2")
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "pyg_cuda_ext"
    job = _put_job(first_aws, tmp_path, fixture, "wf-pyg-cuda")
    serial, one = _build(first_aws, job, tmp_path / "one" / "work", cache_dir, None, {cores[0]})
    job = _put_job(second_aws, tmp_path, fixture, "wf-pyg-cuda")
    side, two = _build(second_aws, job, tmp_path / "elsewhere" / "two" / "work", cache_dir, None, set(cores[:2]))
    log = first_aws.text(serial["log_key"])
    assert "MAX_JOBS=1 each" in log and "chains side by side" not in log, log[-3000:]
    assert one.cu_files == {"scale_cuda.cu", "shift_cuda.cu"} and one.most_cu_at_once == 1, one.cu_files
    assert not one.overlapped("scale", "shift"), one.spans  # one core: one extension, then the other
    log = second_aws.text(side["log_key"])
    assert "MAX_JOBS=2 each" in log, log[-3000:]
    assert "2 extensions in 2 chains side by side, up to 2 compilers at once" in log, log[-3000:]
    # the two chains compile side by side: each extension's units had begun before the other's ended (whether
    # the two .cu files also met depends on how long each .cpp took on this machine's cores: not asserted)
    assert two.cu_files == {"scale_cuda.cu", "shift_cuda.cu"} and two.overlapped("scale", "shift"), two.spans
    assert two.flags and all("--threads 1" in f for f in two.flags), two.flags  # 2 compilers x 1 thread
    assert two.most_at_once == 1, f"{two.most_at_once} cicc/ptxas of one nvcc at a time"
    (first,), (second,) = serial["wheels"], side["wheels"]
    assert first["filename"] == second["filename"] and "cu130" in first["filename"]
    body = second_aws.s3.get_object(Bucket=second_aws.bucket, Key=second["key"])["Body"].read()
    with zipfile.ZipFile(io.BytesIO(body)) as wheel:
        libraries = [wheel.read(n) for n in wheel.namelist() if n.endswith("_cuda.so")]
    assert len(libraries) == 2 and all(b"_GLOBAL__N__" in so for so in libraries), "no internal-linkage device code"
    assert first["sha256"] == second["sha256"], f"{first['filename']}: serial and side by side, two folders, differ"
