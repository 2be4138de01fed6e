"""Memory as a limit, on real builds: compilers at once bounded by an instance's memory, an OOM kill explained
and retried with fewer compilers, an interrupted cell resumed from the compiler cache.

The source is examples/extension-ninja-off, its four C++ units compiled in parallel by
wfbuild.compiling.parallel_compile. Each unit here includes ATen's headers and torch's pybind11 caster
(torch/csrc/utils/pybind.h) instead of torch/extension.h: about 0.95 GiB and 13 s of cc1plus each, not 1.5 GiB
and 27 s (g++ 12, torch 2.13), and the same for every unit, which the limits below need ("two at once do
not fit, one does" holds by half a unit). The runner runs in host mode against
moto (tests/buildspecs/test_runner.py's harness) on 2 cores, in a memory cgroup of its own
(tests/buildspecs/memory_cgroup.py) whose limit plays the instance's memory: the runner reads it as the
host's (wfbuild.hostinfo) and the kernel's OOM killer enforces it, as on an instance. A sampler reads /proc
every 20 ms: the cc1plus processes in that cgroup at each moment.

1. Measured: no limit. Two compilers at once (the cores); the manifest records each unit's peak, which
   calibration keeps and the planner turns into memory per compiler.
2. The instance given 1.5 compilers' worth of memory for compilers: the units together need more than it
   has; planned by the recorded peak, the runner runs one compiler at a time, and no compiler is killed.
   That build is a spot instance's, with the job's compiler cache on the stack's bucket: reclaimed once two
   units have been stored, it is relaunched on a new instance (a fresh folder) in the same memory, whose
   cache hits are exactly the units the first one stored, its misses the rest; its wheel is (1)'s, byte for
   byte. (One pair of builds shows both; apart, each point cost a build of all four units of its own.)
3. The same instance with a model that underestimates (0.05 GiB a compiler): two at once, the kernel kills
   one, the failure reads ``OUT OF MEMORY: ...``, and the cell is built again with one compiler at a time:
   the same wheel.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.buildspecs.conftest import ROOT
from tests.buildspecs.memory_cgroup import MemoryCgroup
from tests.buildspecs.test_runner import Aws, moto_endpoint, runner_env, tarball  # noqa: F401
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.planning.calibration import cell_cost, cells_of, updated
from wheelfoundry.planning.compiler_memory import gib_per_compiler, recorded_gib, words
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request

# several real builds: `make test-heavy`, not `make test`; it gives each file to one worker (--dist loadfile),
# so the module fixture `measured` (the unlimited build) is made once
pytestmark = pytest.mark.heavy

NINJA_OFF = ROOT / "examples" / "extension-ninja-off"
HEAVIER = "#include <torch/extension.h>"
LIGHTER = "#include <ATen/ATen.h>\n#include <torch/csrc/utils/pybind.h>"
NAME = "wf-segops"
CELL = "torch2.13.0-cp311-cpu-x86_64"
REQUEST: dict[str, Any] = {
    "framework": "extension",
    "name": NAME,
    "torch": ["2.13"],
    "cuda": ["cpu"],
    "python": ["3.11"],
    "torch_index": "pip",  # this host's pip configuration: torch 2.13.0 from its local wheel
    "options": {"executor": "ec2"},  # an instance (CodeBuild's smallest would hold one compiler at a time)
}


class Sampler(threading.Thread):
    """Every 20 ms, the cc1plus processes in the instance's cgroup, with the time; the cgroup's memory. (The
    cgroup, not the runner's process tree: with a compiler cache, sccache's server runs the compilers, and
    it detaches from the runner that started it.)"""

    def __init__(self, cgroup: MemoryCgroup) -> None:
        super().__init__(daemon=True)
        self.cgroup = cgroup
        self.stop = threading.Event()
        self.counts: list[tuple[float, int]] = []
        self.most_rss = 0

    def run(self) -> None:
        while not self.stop.wait(0.02):
            mine = 0
            for pid in self.cgroup.pids():
                try:
                    mine += Path(f"/proc/{pid}/comm").read_text().strip() == "cc1plus"
                except OSError:
                    continue
            self.counts.append((time.time(), mine))
            self.most_rss = max(self.most_rss, self.cgroup.rss_bytes())

    def most(self, start: float = 0.0, end: float = float("inf")) -> int:
        return max((n for t, n in self.counts if start <= t <= end), default=0)


def _job(aws: Aws, source: Path, record: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> str:
    """The job Validate would write (planned with ``record``: the source's recorded cells), in ``aws``."""
    key = f"sources/{NAME}.tar.gz"
    aws.s3.put_object(Bucket=aws.bucket, Key=key, Body=tarball(source, f"{NAME}-0.1.0"))
    request = {**REQUEST, "source": {"s3": f"s3://{aws.bucket}/{key}"}}
    (job,) = plan_request(parse_request(request), load_catalog(), load_config(), record=record).jobs
    contract = job.to_dict()
    contract["env"] |= env or {}
    prefix = f"runs/run-1/jobs/{job.id}/"
    contract["run"] = {"id": "run-1", "bucket": aws.bucket, "prefix": prefix, "channel": "dev", "ecr_repository": "",
                       "region": aws.region, "job_role_arn": "arn:aws:iam::123456789012:role/wf-test-job"}  # fmt: skip
    aws.s3.put_object(Bucket=aws.bucket, Key=f"{prefix}job.json", Body=json.dumps(contract).encode())
    return f"{prefix}job.json"


def _build(
    aws: Aws, job_key: str, work: Path, cache: Path, cgroup: MemoryCgroup, token: bool = True, **extra: str
) -> tuple[int, dict[str, Any], Sampler]:
    """One runner on 2 cores inside ``cgroup``: its exit status, the manifest it uploaded, the sampler."""
    execution, task = aws.task_token() if token else ("", "")
    env = runner_env(aws, job_key, task, work, cache, **extra)
    sampler = Sampler(cgroup)
    two = set(sorted(os.sched_getaffinity(0))[:2])
    argv = cgroup.argv([sys.executable, "-m", "wfbuild.runner.runner"])
    pin = lambda: os.sched_setaffinity(0, two)  # noqa: E731
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True, preexec_fn=pin) as proc:
        sampler.start()
        try:
            out, _ = proc.communicate(timeout=1800)
        finally:
            sampler.stop.set()
            sampler.join()
    manifest = json.loads(aws.text(job_key.replace("job.json", "manifest.json")))
    if token:
        aws.finished(execution)
    print(out[-3000:])
    return proc.returncode, manifest, sampler


def _wheel(manifest: dict[str, Any]) -> str:
    (wheel,) = manifest["wheels"]
    return str(wheel["sha256"])


@pytest.fixture(scope="module")
def measured(moto_endpoint: str, cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """(1): the unlimited build; its manifest, the cgroup's most memory, the sampler, the source."""
    tmp = tmp_path_factory.mktemp("memory")
    source = _copy(NINJA_OFF, tmp / "src")
    aws = Aws(moto_endpoint, "us-west-2")
    job = _job(aws, source)
    with MemoryCgroup() as cgroup:
        code, manifest, sampler = _build(aws, job, tmp / "work", cache_dir, cgroup)
    assert code == 0 and manifest["status"] == "succeeded", manifest.get("failures")
    log = aws.text(job.replace("job.json", "build.log"))
    said = [line for line in log.splitlines() if "cell(s)," in line or "parallel compile" in line]
    return {
        "manifest": manifest,
        "rss": sampler.most_rss,
        "sampler": sampler,
        "source": source,
        "tmp": tmp,
        "said": said,
    }


def _copy(src: Path, dest: Path) -> Path:
    """The example with each unit's torch/extension.h swapped for LIGHTER (the module docstring)."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so"))
    units = sorted((dest / "csrc").glob("*.cpp"))
    for unit in units:
        text = unit.read_text()
        assert text.count(HEAVIER) == 1, f"{unit.name}: the example no longer includes {HEAVIER}"
        unit.write_text(text.replace(HEAVIER, LIGHTER).replace("torch::", "at::"))
    assert len(units) == 4, [u.name for u in units]
    return dest


def _limits(measured: dict[str, Any]) -> tuple[int, int]:
    """The instance's memory (bytes) and the peak unit (MiB): two compilers at once do not fit, one does."""
    peak = int(measured["manifest"]["compile_memory"]["peak_unit_mib"])
    limit = int(measured["rss"] - 0.5 * peak * 2**20)
    return limit, peak


def test_an_oom_killed_compile_is_explained_and_the_cell_is_built_again_with_fewer_compilers(
    moto_endpoint: str,  # noqa: F811
    cache_dir: Path,
    measured: dict[str, Any],
) -> None:
    limit, peak = _limits(measured)
    per_job = gib_per_compiler(recorded_gib(peak))
    reserve = limit / 2**30 - 1.5 * per_job
    aws = Aws(moto_endpoint, "eu-central-1")
    # A model that underestimates the source: 0.05 GiB a compiler, so the runner runs the cores' two at once
    env = {"WF_RESERVE_GIB": f"{reserve:.3f}", "WF_GIB_PER_COMPILE_JOB": "0.05"}
    job = _job(aws, measured["source"], None, env)
    with MemoryCgroup(limit) as cgroup:
        code, manifest, sampler = _build(aws, job, measured["tmp"] / "work", cache_dir, cgroup)
        kills = cgroup.oom_kills()
    assert kills >= 1, "the kernel's OOM killer ended a compiler"
    assert code == 0 and manifest["status"] == "succeeded", manifest.get("failures")
    first, second = [s for s in manifest["stages"] if s["name"] == f"build-{CELL}"]
    assert (first["status"], second["status"]) == ("retried", "succeeded")
    found = first["oom"]
    assert found["tool"] == "cc1plus" and found["unit"].startswith("csrc/") and found["peak_mib"] > 0.5 * peak
    log = aws.text(job.replace("job.json", "build.log"))
    verdict = next(line for line in log.splitlines() if line.startswith("OUT OF MEMORY: "))
    print(verdict)
    assert verdict.startswith(f"OUT OF MEMORY: cell {CELL}: {found['unit']} (cc1plus) was killed at ")
    assert f"on a {limit / 2**30:.1f} GiB instance" in verdict and "with 1 compiler(s) at once, not 2" in verdict
    assert "MAX_JOBS=2 each" in log
    assert sampler.most(first["started_at"], first["ended_at"]) == 2
    assert sampler.most(second["started_at"], second["ended_at"]) == 1, "the retry: one compiler at a time"
    assert second["memory"]["compilers_at_once"] == 1
    assert _wheel(manifest) == _wheel(measured["manifest"])


def _contract(manifest: dict[str, Any]) -> dict[str, Any]:
    """The job contract calibration reads beside a manifest: the one planned from REQUEST."""
    request = {**REQUEST, "source": {"s3": "s3://wf-sources/sources/x.tar.gz"}}
    (job,) = plan_request(parse_request(request), load_catalog(), load_config()).jobs
    return job.to_dict()


def _cached_units(aws: Aws) -> int:
    """Compiled units in the job's compiler cache on the bucket (sccache's own write check left out)."""
    pages = aws.s3.get_paginator("list_objects_v2").paginate(Bucket=aws.bucket, Prefix="sccache/")
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    return sum(1 for key in keys if not key.rsplit("/", 1)[-1].startswith("."))


class SpotNotice(http.server.BaseHTTPRequestHandler):
    """Instance metadata of a spot instance whose interruption notice appears once ``due`` is set."""

    due = threading.Event()

    def do_PUT(self) -> None:
        self._reply(200, "imds-token")

    def do_GET(self) -> None:
        if self.path.endswith("instance-life-cycle"):
            self._reply(200, "spot")
        elif self.path.endswith("spot/instance-action") and SpotNotice.due.is_set():
            self._reply(200, '{"action": "terminate", "time": "2026-11-27T04:00:00Z"}')
        else:
            self._reply(404, "")

    def _reply(self, status: int, body: str) -> None:
        self.send_response(status)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


def test_units_needing_more_memory_than_the_instance_has_compile_one_at_a_time_and_a_relaunch_compiles_the_rest(
    moto_endpoint: str,  # noqa: F811
    cache_dir: Path,
    tmp_path: Path,
    measured: dict[str, Any],
) -> None:
    first = measured["manifest"]
    memory = first["compile_memory"]
    full = next(s for s in first["stages"] if s["name"] == f"build-{CELL}")
    assert full["memory"]["units_seen"] >= 4 and memory["tool"] == "cc1plus", full["memory"]
    assert measured["sampler"].most() == 2, f"unlimited, the two cores' compilers ran at once: {measured['said']}"
    limit, peak = _limits(measured)
    # What the next plan of this source knows: the peak its run recorded, with headroom, per compiler
    config = load_config()
    record = updated(None, "scope", "run-1", cells_of(_contract(first), first, config))
    assert record["cells"][0]["peak_gib"] == recorded_gib(peak)
    per_job = cell_cost(False, 1, config, record).gib_per_compiler(False, config)[0]
    assert per_job == gib_per_compiler(recorded_gib(peak))
    # The instance: 1.5 such compilers' worth of memory for compilers, the rest the runner's reserve
    reserve = limit / 2**30 - 1.5 * per_job
    units = [u["peak_mib"] for u in full["memory"]["units"]]
    assert sum(units) > 1.5 * per_job * 1024, "the units together need more memory than the instance has"
    aws = Aws(moto_endpoint, "ap-southeast-2")
    cached = {"WF_RESERVE_GIB": f"{reserve:.3f}", "SCCACHE_BUCKET": aws.bucket, "SCCACHE_REGION": aws.region}
    job = _job(aws, measured["source"], record, cached)
    imds = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SpotNotice)
    threading.Thread(target=imds.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{imds.server_address[1]}"
    work = tmp_path / "first"

    def interrupt() -> None:  # once two of the four units are in the compiler cache, the instance is reclaimed
        # (the cache's objects, not the build's .o files: sccache stores an object after the compile that made
        # it, and a busy machine can stop the server before a late store lands)
        while not SpotNotice.due.is_set():
            if _cached_units(aws) >= 2:
                SpotNotice.due.set()
            time.sleep(0.05)

    watcher = threading.Thread(target=interrupt, daemon=True)
    watcher.start()
    with MemoryCgroup(limit) as cgroup:
        try:
            spot = {"AWS_EC2_METADATA_SERVICE_ENDPOINT": endpoint, "WF_SPOT_POLL_SECONDS": "0.2"}
            code, interrupted, sampler = _build(aws, job, work, cache_dir, cgroup, token=False, **spot)
        finally:
            SpotNotice.due.set()
            imds.shutdown()
        log = aws.text(job.replace("job.json", "build.log"))
        stored = _cached_units(aws)  # what the relaunch can find, whatever the server had counted when it stopped
        # The relaunch: a new instance (a fresh folder), the same job, memory and compiler cache
        code2, resumed, sampler2 = _build(aws, job, tmp_path / "second", cache_dir, cgroup, token=False)
        kills = cgroup.oom_kills()
    assert code == 1 and interrupted["status"] == "failed"
    assert "aborting: SpotInterrupted" in log, log[-2000:]
    assert interrupted["parallelism"]["gib_per_compiler"] == per_job, "the plan's figure, from the record"
    assert "MAX_JOBS=1 each" in log and f"at {words(per_job)} each, 1 at once" in log, log[-3000:]
    assert sampler.most() == 1, "one compiler at a time, as the memory holds"
    assert 2 <= stored < 4, f"interrupted mid-compile: {stored} of the 4 units stored"
    assert interrupted["compiler_cache"]["writes"] <= stored, interrupted["compiler_cache"]
    build = next(s for s in interrupted["stages"] if s["name"] == f"build-{CELL}")
    assert build["status"] == "aborted"
    assert code2 == 0 and resumed["status"] == "succeeded", resumed.get("failures")
    relog = aws.text(job.replace("job.json", "build.log"))
    # The relaunch sizes its compilers by the larger of the plan's figure and what the plan's rule gives the
    # peak the interrupted attempt measured (whatever this machine measured), and prints that one figure
    seen = interrupted["compile_memory"]["peak_unit_mib"]
    resized = max(per_job, gib_per_compiler(recorded_gib(seen)))
    assert resumed["parallelism"]["gib_per_compiler"] == resized, (resumed["parallelism"], seen)
    assert f"at {words(resized)} each, 1 at once" in relog and sampler2.most() == 1, relog[-3000:]
    assert kills == 0 and "OUT OF MEMORY" not in log + relog
    stats = resumed["compiler_cache"]
    assert stats["hits"] == stored and stats["misses"] == 4 - stored, stats
    again = next(s for s in resumed["stages"] if s["name"] == f"build-{CELL}")
    # What the relaunch would have cost without the cache: the module's build of the same cell, all 4 units
    # compiled (CPU seconds, so its 2 compilers at once against the relaunch's one do not count)
    assert not (first.get("compiler_cache") or {}).get("hits"), "the baseline compiled every unit"
    assert again["cpu_seconds"] < 0.8 * full["cpu_seconds"], "the relaunch compiled only the units left"
    assert _wheel(resumed) == _wheel(first), "the same wheel, byte for byte"
    print(
        f"interrupted attempt: build stage {build['seconds']:.1f} s ({stored} units stored); relaunch: "
        f"{again['seconds']:.1f} s, {again['cpu_seconds']:.0f} CPU-s ({stats['hits']} hits, {stats['misses']} "
        f"misses); the cell cold: {full['seconds']:.1f} s, {full['cpu_seconds']:.0f} CPU-s"
    )
