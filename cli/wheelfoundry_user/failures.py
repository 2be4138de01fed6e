"""Why a run failed, the way a build tool says it: per failed job the stage, the cause line(s) from its
log and where the whole log is. The raw error payloads (a Lambda's JSON, its stack trace) stay behind
``--json`` / ``--debug``.

Everything comes from what the run left in the bucket: ``runs/<run>/report.json`` (each failure), and
per job ``result.json`` (the runner's cause: stage, log key, log tail) and ``manifest.json`` (the stage
results) — so `wheelfoundry status`, `start --wait` and `local run/demo` explain a failure alike.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

GetJson = Callable[[str], Any]
# Lines worth showing from a log tail: what compilers, pip, Python and our own tools say when they fail.
CAUSE = re.compile(
    r"error|fatal|failed|no such file|not found|cannot|exception|traceback|refus|denied|no python|timed out|"
    r"does not match|killed|out of memory",
    re.IGNORECASE,
)
# The runner's own bookkeeping says *that* a stage failed; the lines above it say why.
BOOKKEEPING = re.compile(
    r"^(\[wfbuild [\d:]+\] (stage \S+: (failed|aborted|skipped)|job failed|skipping |aborting)|manifest: )"
)
TRACE = re.compile(r'^(File "|raise |Traceback \(most recent|[\^~ ]+$)')  # a traceback's frames, not its verdict
COMPILER = re.compile(r":\d+(:\d+)?: (fatal error|error): ")  # gcc, nvcc, clang: the first one is the root
EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception): ")  # a Python traceback's last line
CELL = re.compile(r"^\[[\w.+-]+\] ")
# Our own verdicts name the wheel, the cell and the check: the best line of all when present.
# (wfbuild.cuda.toolkit: the toolkit stage's one line, e.g. a lock that lacks what the job asks of it)
VERDICT = re.compile(
    r"^(PUBLISHED WHEEL FAILED|SMOKE FAILED|DEVICE CODE REFUSED|ABI REFUSED|OUT OF MEMORY|wfbuild\.cuda\.toolkit): "
)  # the runner prefixes an extension cell's output with its id


@dataclass(frozen=True)
class JobFailure:
    job: str
    error: str
    stage: str | None
    cause: tuple[str, ...]
    log_key: str | None


def readable(text: str | None) -> str:
    """A Lambda error's cause is its JSON payload: the message without the stack trace."""
    if not text:
        return ""
    try:
        payload = json.loads(text)
    except ValueError:
        return text
    if isinstance(payload, dict) and "errorMessage" in payload:
        return str(payload["errorMessage"])
    return text


def cause_lines(text: str, limit: int = 3) -> tuple[str, ...]:
    """The lines that say why: a compiler's first errors, else a Python exception's verdict, else the last
    lines that name an error or a missing file, else the last line of all."""
    lines = [CELL.sub("", ln.strip(), count=1).strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln and not BOOKKEEPING.match(ln) and not TRACE.match(ln) and not ln.startswith("+ ")]
    compiler = list(dict.fromkeys(ln for ln in lines if COMPILER.search(ln)))[:limit]
    exceptions = list(dict.fromkeys(ln for ln in lines if EXCEPTION.match(ln)))[-limit:]
    hits = list(dict.fromkeys(ln for ln in lines if CAUSE.search(ln)))[-limit:]
    verdicts = list(dict.fromkeys(ln for ln in lines if VERDICT.match(ln)))[:limit]
    chosen = verdicts or compiler or exceptions or hits or lines[-1:]
    return tuple(ln if len(ln) <= 300 else ln[:297] + "..." for ln in chosen)


def _runner_cause(cause: str | None) -> dict[str, Any] | None:
    """The runner's failure cause ({job_id, stage, log_key, log_tail}), when that is what it is."""
    try:
        payload = json.loads(cause or "")
    except ValueError:
        return None
    return payload if isinstance(payload, dict) and "log_tail" in payload else None


def _first_failed_stage(manifest: dict[str, Any] | None) -> dict[str, Any] | None:
    for stage in (manifest or {}).get("stages", []):
        if stage.get("status") in ("failed", "aborted"):
            return dict(stage)
    return None


def job_failure(get_json: GetJson, run: str, job: str, error: str, cause: str | None) -> JobFailure:
    prefix = f"runs/{run}/jobs/{job}/"
    result = get_json(prefix + "result.json") or {}
    runner = _runner_cause(result.get("cause") or cause)
    if runner:
        return JobFailure(job, error, runner.get("stage"), cause_lines(runner["log_tail"]), runner.get("log_key"))
    stage = _first_failed_stage(get_json(prefix + "manifest.json"))
    if stage:
        failures = (get_json(prefix + "manifest.json") or {}).get("failures", [])
        tail = next((f.get("log_tail") for f in failures if f.get("stage") == stage["name"]), None)
        text = tail or stage.get("error") or readable(cause)
        return JobFailure(job, error, stage["name"], cause_lines(text), prefix + "build.log")
    return JobFailure(job, error, None, cause_lines(readable(result.get("cause") or cause)), None)


def run_failures(get_json: GetJson, run: str) -> list[JobFailure]:
    """Every failure report.json names (jobs, the merge, the index, images), explained."""
    report = get_json(f"runs/{run}/report.json") or {}
    return [
        job_failure(get_json, run, f["job_id"], f.get("error") or "Failed", f.get("cause"))
        for f in report.get("failed", [])
    ]


def render(failures: list[JobFailure], bucket: str, local_logs: dict[str, str] | None = None) -> list[str]:
    lines = []
    for f in failures:
        where = f" at stage {f.stage}" if f.stage else ""
        lines.append(f"  {f.job}: {f.error}{where}")
        lines += [f"    {line}" for line in f.cause]
        if f.log_key:
            lines.append(f"    log: s3://{bucket}/{f.log_key}")
        if local_logs and f.job in local_logs:
            lines.append(f"    log here: {local_logs[f.job]}")
    return lines


def execution_failure(
    status: str, error: str | None, cause: str | None, failures: list[JobFailure], bucket: str, **kw: Any
) -> list[str]:
    """The closing lines of a failed run: one heading, then each failure (no payloads, no traces)."""
    if failures:
        head = f"run {status}: {len(failures)} failure(s)"
        return [head, *render(failures, bucket, kw.get("local_logs"))]
    return [f"run {status}: {error or 'failed'}", *(f"  {line}" for line in cause_lines(readable(cause), 5))]
