"""Memory as a limit of a job's compiles: what each unit's compiler held, an OOM kill explained, and the
cell retried with fewer compilers at once.

Every compile stage runs with the job's memory watch (wfbuild.compiling.memwatch) and its stage result keeps
``memory``: its units' peaks and the most compilers and memory at once; the manifest keeps the job's
largest unit (``compile_memory``), which calibration records and the planner sizes the next run by.

A compile stage that fails because the kernel's OOM killer ended one of its compilers (wfbuild.compiling.oom) is
explained in one line (``OUT OF MEMORY: ...``: the cell, the unit, its peak, this instance's memory, what
the farm does next) and run again at once with fewer compilers: half as many, or as many as the memory holds
at the unit's peak, nvcc threads off; the compiler cache keeps what had finished. At one compiler at once
there is nothing fewer: the job fails with CompilerOutOfMemory, which the state machine answers by
relaunching it on its larger instance (the job contract's ``retry_instance``). A relaunch, like one after a
spot interruption or a timeout, reads the earlier attempt's manifest: its compilers are sized by the peak
that attempt saw, not the model that fell short.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from wfbuild import hostinfo
from wfbuild.compiling import compiler_memory, memwatch, oom

if TYPE_CHECKING:
    from wfbuild.runner.job import Job

VERDICT = "OUT OF MEMORY"
MEMORY_RECORD = "compile memory record:"  # one JSON line per compile stage in build.log


class CompileMemory:
    def __init__(self, job: Job) -> None:
        self.job = job
        self.watch = memwatch.MemoryWatch()
        self.reports: dict[str, dict[str, Any]] = {}
        self.earlier_peak_mib = 0  # the largest unit an earlier attempt of this job saw (0: none)
        self._before: dict[str, tuple[int | None, int | None]] = {}
        self._attempts: dict[str, int] = {}  # a stage's runs so far (an OOM retry runs it again)

    def start(self) -> None:
        self.watch.start()
        self.job.threads.append(self.watch)
        self.earlier_peak_mib = self._earlier_attempt()
        if self.earlier_peak_mib:
            self.job.log.note(
                f"an earlier attempt of this job saw a compiler peak at {self.earlier_peak_mib} MiB: "
                f"compilers at once are sized by it"
            )

    def _earlier_attempt(self) -> int:
        """The peak unit an earlier attempt's manifest recorded (this job's prefix: a relaunch), else 0.
        Only an EC2 build job is ever relaunched: a CodeBuild or test job reads nothing (its role may not)."""
        if self.job.job.get("executor") == "codebuild" or self.job.job.get("kind") == "test":
            return 0
        try:
            body = self.job.s3.get_object(Bucket=self.job.bucket, Key=self.job.keys()["manifest"])["Body"].read()
            peak = json.loads(body).get("compile_memory", {}).get("peak_unit_mib")
        except Exception:  # no earlier attempt, or nothing usable in it: the plan's figure
            return 0
        return int(min(max(peak, 0), 1 << 20)) if isinstance(peak, (int, float)) and not isinstance(peak, bool) else 0

    def gib_per_compiler(self, planned: float) -> float:
        """Memory to plan each compiler at: the plan's figure, or, if larger, the figure a plan would give the
        earlier attempt's peak (wfbuild.compiling.compiler_memory: one rule, so the log and the plan print one
        figure)."""
        return max(planned, self.earlier_gib()) if self.earlier_peak_mib else planned

    def earlier_gib(self) -> float:
        """An earlier attempt's peak as a plan's memory per compiler (0.0: no earlier attempt)."""
        if not self.earlier_peak_mib:
            return 0.0
        return compiler_memory.gib_per_compiler(compiler_memory.recorded_gib(self.earlier_peak_mib))

    def env(self, stage: str) -> dict[str, str]:
        """The stage's marker for the memory watch; each attempt of a stage (a retry) is measured apart."""
        self._attempts[stage] = self._attempts.get(stage, 0) + 1
        self._before[stage] = (oom.kernel_log_position(), hostinfo.oom_kills())
        return self.watch.marker(self._key(stage))

    def _key(self, stage: str) -> str:
        attempt = self._attempts.get(stage, 1)
        return stage if attempt <= 1 else f"{stage}@{attempt}"

    def finished(
        self, stage: str, cell: str | None, code: int, tail: Sequence[str], extra: Mapping[str, str]
    ) -> tuple[dict[str, Any] | None, oom.Oom | None]:
        """The stage's memory record, and whether it failed for memory."""
        self.watch.sample()  # the last reading before the stage's figures are taken
        key = self._key(stage)
        report = self.watch.report(key)
        if report is not None:
            self.reports[key] = report
            largest = ", ".join(f"{u['unit']} {u['peak_mib']} MiB ({u['tool']})" for u in report["units"][:3])
            self.job.log.note(
                f"memory of {stage}: {report['units_seen']} unit(s), the largest {largest}; at most "
                f"{report['compilers_at_once']} compiler(s) holding {report['compilers_mib_at_once']} MiB at once"
            )
            self.job.log.note(f"{MEMORY_RECORD} {stage} {json.dumps(report, sort_keys=True)}")  # bench/heavy_cell.py
        if code == 0 or self.job.runner.aborted:
            return report, None
        position, count = self._before.get(stage, (None, None))
        now = hostinfo.oom_kills()
        delta = (now - count) if now is not None and count is not None else 0
        budget = self.budget_gib(extra) * 1024
        found = oom.diagnose(tail, self.watch.pids(key), report, oom.kernel_kills(position), delta, budget)
        return report, found

    def budget_gib(self, extra: Mapping[str, str]) -> float:
        """The memory one cell's compilers may hold: this host's, less the runner's reserve, shared by the cells
        that build at once."""
        reserve = float(self.job.job.get("env", {}).get("WF_RESERVE_GIB") or 4.0)
        cells = max(1, int(extra.get("WF_CELLS_AT_ONCE") or 1))
        return max(0.25, (hostinfo.memory_gib() - reserve) / cells)

    def retry(self, stage: str, cell: str | None, found: oom.Oom, extra: Mapping[str, str]) -> dict[str, str] | None:
        """Say what happened and what the farm does; the retry's settings, or None: nothing fewer to try."""
        jobs = max(1, int(extra.get("MAX_JOBS") or 1))
        threads = max(1, int(extra.get("WF_NVCC_THREADS") or 1))
        at_once = jobs * threads  # what the cell was given (its nvcc steps may have run a few more)
        budget = self.budget_gib(extra)
        each = compiler_memory.gib_per_compiler(compiler_memory.recorded_gib(found.peak_mib))
        fits = math.floor(budget / each) if found.peak_mib else at_once
        fewer = max(1, min(at_once // 2, fits)) if at_once > 1 else 0
        where = f"cell {cell}" if cell else f"stage {stage}"
        # What a reader needs first (the CLI shows 300 characters): the unit, its peak, the instance, the remedy
        head = (
            f"{VERDICT}: {where}: {found.unit} ({found.tool}) was killed at {found.peak_mib} MiB on a "
            f"{hostinfo.memory_gib():.1f} GiB instance ({budget:.1f} GiB for the cell's compilers, {at_once} at once)"
        )
        evidence = f"(evidence: {found.how}; {found.at_once} compiler(s) held {found.mib_at_once} MiB at most)"
        if fewer:
            again = f"the farm builds the cell again with {fewer} compiler(s) at once, not {at_once} (nvcc threads 1)"
            self.job.log.write(f"{head}; {again}, the compiler cache keeping the units that finished {evidence}")
            return {
                **extra,
                "MAX_JOBS": str(fewer),
                "CMAKE_BUILD_PARALLEL_LEVEL": str(fewer),
                "WF_NVCC_THREADS": "1",
                "WF_NVCC_THREADS_ALONE": "1",
                "WF_NVCC_THREADS_POOLED": "0",
                "WF_NVCC_THREADS_UNPOOLED": "1",
            }
        self.job.log.write(f"{head}; one compiler at once is already the fewest: {self.larger()} {evidence}")
        return None

    def larger(self) -> str:
        """What the farm does when one compiler alone does not fit: the job contract's larger instance."""
        bigger = self.job.job.get("retry_instance") or {}
        memory = float(bigger.get("memory_gib") or 0)
        if bigger.get("type") and memory > hostinfo.memory_gib() + 0.5:
            return f"the farm relaunches the job on a {bigger['type']} ({memory:g} GiB) with what it learned here"
        return (
            "no larger instance is planned for this job: build the package with a larger instance type, "
            "or fewer architectures in arch_list"
        )

    def add_to_manifest(self, data: dict[str, Any]) -> None:
        """The job's largest unit over its compile stages (what calibration records), and every stage's."""
        if not self.reports:
            return
        top = max(self.reports.values(), key=lambda r: r["peak_unit_mib"])
        data["compile_memory"] = {
            "peak_unit_mib": top["peak_unit_mib"],
            "unit": top["unit"],
            "tool": top["tool"],
            "memory_gib": round(hostinfo.memory_gib(), 2),
            "stages": {name: {k: r[k] for k in ("peak_unit_mib", "unit", "compilers_at_once")}
                       for name, r in self.reports.items()},
        }  # fmt: skip
