"""The runner's last steps: the job's manifest (its own, checked, or one that says why not), then the
uploads (wheels, manifest, build.log) and the callback. Exit status: 0 success reported, 1 failure
reported, 3 token gone (wfbuild.runner.runner)."""

from __future__ import annotations

import json
import platform
from typing import TYPE_CHECKING, Any

from wfbuild import hostfiles
from wfbuild.runner import callback, manifest, stage_env
from wfbuild.stages.stages import Stage

TIME_LIMIT = "time limit exceeded"  # the runner's own deadline, a little before the Build state's timeout

if TYPE_CHECKING:
    from wfbuild.runner.job import Job


def write_results(job: Job) -> None:
    data = json.dumps(job.results, indent=1).encode("utf-8")
    hostfiles.write_inside(job.work, job.work / "meta" / "stages.json", data)


def load_manifest(job: Job) -> dict[str, Any]:
    try:
        write_results(job)
        data: dict[str, Any] = json.loads(hostfiles.read_inside(job.work, job.work / "manifest.json"))
        data["stages"] = [{k: v for k, v in r.items() if k != "log_tail"} for r in job.results]
    except hostfiles.UnsafeFile as exc:
        if isinstance(exc, hostfiles.Missing) and job.mode == "none":
            data = manifest.build_manifest(job.work)  # host mode: the manifest stage did not run
        else:  # a planted link, a giant, or no manifest in a tree that is the build's: trust none of it
            job.log.note(f"no manifest from the job: {exc}")
            data = failed_manifest(job, f"no usable manifest: {exc}")
    except ValueError as exc:
        data = failed_manifest(job, f"the job's manifest.json is not JSON: {exc}")
    data["sources"] = {**(data.get("sources") or {}), **job.sources}
    if job.runner.aborted:
        data["status"] = "failed"
    data["builder"] = job.builder if job.mode == "docker" else {**job.builder, "host": platform.platform()}
    if job.parallelism:  # the estimate's calibration reads it (wheelfoundry.planning.calibration)
        data["parallelism"] = job.parallelism
    job.memory.add_to_manifest(data)  # each unit's peak: what the next plan of this source sizes memory by
    job.compile.add_to_manifest(data, job.cache, stage_env.for_stage(job, Stage("sccache", [], {}), False))
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    (job.private / "manifest.json").write_text(text, encoding="utf-8")
    return data


def failed_manifest(job: Job, error: str) -> dict[str, Any]:
    data = {"schema": manifest.SCHEMA, "job_id": job.job.get("id", ""), "status": "failed", "wheels": []}
    return data | {"stages": job.results, "failures": [{"stage": "runner", "error": error}]}


def first_failure(job: Job) -> str:
    bad = [r["name"] for r in job.results if r["status"] in ("failed", "aborted")]
    return bad[0] if bad else "smoke"


def failure_reason(job: Job) -> str:
    """The error the state machine matches on: SpotInterrupted and BuildTimedOut relaunch the job (its compiler
    cache keeps what finished), CompilerOutOfMemory relaunches it on a larger instance; BuildFailed does not."""
    if job.runner.aborted == "SpotInterrupted":
        return "SpotInterrupted"
    if job.runner.aborted == TIME_LIMIT:
        return "BuildTimedOut"
    failed = [r for r in job.results if r.get("status") in ("failed", "aborted")]
    return "CompilerOutOfMemory" if failed and failed[0].get("oom") else "BuildFailed"


def finish(job: Job, data: dict[str, Any] | None, error: str | None = None) -> int:
    """Upload wheels, manifest and log, then call back; returns the exit status."""
    keys = job.keys()
    if data is None:  # the job could not even be read: a manifest that says so
        data = failed_manifest(job, error or "runner failed")
        (job.private / "manifest.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    ok = error is None and data["status"] != "failed"
    try:
        wheels = callback.upload_wheels(job.s3, job.bucket, job.prefix, job.work, data) if ok else []
    except hostfiles.UnsafeFile as exc:  # a wheel path the build planted: nothing is published
        job.log.note(f"refusing to upload: {exc}")
        ok, wheels, data["status"] = False, [], "failed"
    job.s3.upload_file(str(job.private / "manifest.json"), job.bucket, keys["manifest"])
    if ok:
        job.log.note(f"job {data['status']}: {len(wheels)} wheel(s) uploaded")
    reason = failure_reason(job)
    if not ok:
        job.log.note(f"job failed ({reason}) at stage {first_failure(job)}")
    for thread in job.threads:  # no heartbeat may race the final callback
        thread.stopped.set()
    job.log.close()
    extra = {"Metadata": callback.LOG_INTERRUPTED} if reason == "SpotInterrupted" and not ok else None
    try:  # the build may have swapped build.log for a link: then only the runner's own lines
        with hostfiles.open_inside(job.work, job.log.path) as handle:
            job.s3.upload_fileobj(handle, job.bucket, keys["log"], ExtraArgs=extra)
    except hostfiles.UnsafeFile as exc:
        body = f"{exc}: the runner's own lines follow\n{job.log.tail_text(400, 1 << 20)}\n".encode()
        job.s3.put_object(Bucket=job.bucket, Key=keys["log"], Body=body, **(extra or {}))
    if job.token_gone:
        return 3
    if ok:
        output = callback.success_output(job.job.get("id", ""), data, keys, wheels)
        if job.token:
            job.sfn.send_task_success(taskToken=job.token, output=output)
        else:
            job.s3.put_object(Bucket=job.bucket, Key=f"{job.prefix}result.json", Body=output.encode())
        return 0
    # A long tail: a compiler's first error can sit a hundred lines above a setup.py traceback.
    tail = job.log.tail_text(400, 24000)
    cause = callback.failure_cause(job.job.get("id", ""), first_failure(job), keys["log"], tail)
    if job.token:
        job.sfn.send_task_failure(taskToken=job.token, error=reason, cause=cause)
    return 1
