"""A run's jobs as the bucket, EC2 and CodeBuild describe them: state, stage, elapsed, cost."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from wheelfoundry.planning import compiler_memory
from wheelfoundry_user import abi, archs
from wheelfoundry_user.failures import JobFailure, execution_failure, run_failures
from wheelfoundry_user.farm import Farm
from wheelfoundry_user.tables import duration, table, usd

ENDED = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")


def _objects(farm: Farm, prefix: str) -> dict[str, datetime]:
    s3, found = farm.client("s3"), {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=farm.bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            found[obj["Key"][len(prefix) :]] = obj["LastModified"]
    return found


def _epoch(value: Any) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


def _codebuild_phase(farm: Farm, build_id: str) -> tuple[str, str, float | None]:
    """(state, stage, start) of a CodeBuild build."""
    try:
        builds = farm.client("codebuild").batch_get_builds(ids=[build_id]).get("builds", [])
    except Exception:  # a status view must show what it can; the build id is still printed
        return "running", "build (CodeBuild)", None
    if not builds:
        return "running", "build (CodeBuild)", None
    build = builds[0]
    status = str(build.get("buildStatus", "IN_PROGRESS"))
    phase = str(build.get("currentPhase", "")).lower()
    state = "running" if status == "IN_PROGRESS" else status.lower()
    return state, f"build: {phase}" if phase else "build", _epoch(build.get("startTime"))


def mine_started(instances: list[dict[str, Any]], job_id: str) -> bool:
    return any(i["Tags"].get("wheelfoundry:job") == job_id for i in instances)


def job_row(
    farm: Farm, run: str, job_id: str, stopped: float | None, instances: list[dict[str, Any]]
) -> dict[str, Any]:
    running = stopped is None
    prefix = f"runs/{run}/jobs/{job_id}/"
    objects = _objects(farm, prefix)
    contract = farm.get_json(prefix + "job.json") or {}
    executor = contract.get("executor", "ec2")
    estimate = contract.get("estimate") or {}
    start: float | None = None
    end: float | None = None
    detail = ""
    if executor == "codebuild":
        build = farm.get_json(prefix + "build.json") if "build.json" in objects else None
        if build:
            state, stage, start = _codebuild_phase(farm, build["build_id"])
            start = start or _epoch(build.get("started_at"))
            detail = build["build_id"]
        else:
            state, stage = ("pending", "start build") if running else ("not started", "-")
    else:
        mine = [i for i in instances if i["Tags"].get("wheelfoundry:job") == job_id and not _is_gpu(i)]
        if mine:
            newest = max(mine, key=lambda i: i.get("LaunchTime") or datetime.min.replace(tzinfo=UTC))
            start = _epoch(newest.get("LaunchTime"))
            state = newest["State"]["Name"]
            stage = {"pending": "launch / await agent", "running": "build"}.get(state, "ended")
            detail = f"{newest['InstanceId']} {newest.get('InstanceType', '')}".strip()
        elif "waiting.json" in objects and running and "result.json" not in objects:
            state, stage, detail = (
                "waiting",
                "waiting for vCPU quota",
                quota_wait(farm.get_json(prefix + "waiting.json")),
            )
        else:
            state, stage = ("pending", "launch") if running else ("not started", "-")
    if "manifest.json" in objects and "result.json" not in objects:
        stage = "collect"
    if contract.get("kind") == "test" and "staged.json" not in objects and not mine_started(instances, job_id):
        # A test job starts after the builds, once Merge staged the wheels to publish (wheelfoundry.planning.testjobs).
        state, stage = ("waiting", "builds, then merge") if running else ("not started", "-")
    gpu = [i for i in instances if i["Tags"].get("wheelfoundry:job") == job_id and _is_gpu(i)]
    if gpu and "result.json" not in objects:  # the GPU test step (options.gpu_test) follows the build
        newest = max(gpu, key=lambda i: i.get("LaunchTime") or datetime.min.replace(tzinfo=UTC))
        state = newest["State"]["Name"]
        stage = {"pending": "gpu test: launch", "running": "gpu test"}.get(state, "gpu test ended")
        detail = f"{newest['InstanceId']} {newest.get('InstanceType', '')}".strip()
    verdict = None
    manifest = (farm.get_json(prefix + "manifest.json") or {}) if "manifest.json" in objects else {}
    cache = cache_cell(manifest)
    if "result.json" in objects:
        result = farm.get_json(prefix + "result.json") or {}
        verdict = (result.get("gpu_test") or {}).get("verdict")
        state, stage = str(result.get("status", "ended")), "done"
        end = objects["result.json"].timestamp()
        if result.get("error"):
            detail = f"{result['error']}: {str(result.get('cause') or '')[:120]}"
    elif not running or stage == "ended":
        end = stopped
    elapsed = None if start is None else (end or datetime.now(UTC).timestamp()) - start
    rate = (estimate.get("usd") or 0) / estimate["hours"] if estimate.get("hours") else None
    actual = None if elapsed is None or rate is None else rate * elapsed / 3600
    return {
        "job": job_id,
        "executor": executor,
        "state": state,
        "stage": stage,
        "elapsed_seconds": None if elapsed is None else round(elapsed, 1),
        "estimated_usd": estimate.get("usd"),
        "estimated_seconds": None if estimate.get("hours") is None else round(float(estimate["hours"]) * 3600),
        "actual_usd": None if actual is None else round(actual, 4),
        "detail": detail,
        "gpu_test": verdict,  # None: no GPU test asked (or not recorded yet)
        "compiler_cache": cache,  # None: no manifest yet, or a build without the stack's cache
        "compiler_memory": memory_cell(manifest),  # memory each compiler was planned at, as the log said it
        "compile_usage": manifest.get("compile_usage"),  # CPU and wall seconds of the compile stages, cores busy
        "device_code": manifest.get("device_code"),  # per CUDA cell: what its build holds (wheelfoundry_user.archs)
        "abi": manifest.get("abi"),  # per extension cell: stable ABI and floor, or per-torch (wheelfoundry_user.abi)
    }


def quota_wait(record: dict[str, Any] | None) -> str:
    """A job waiting for EC2 vCPU quota (wheelfoundry.aws.admission): the numbers, in one cell."""
    record = record or {}
    quota = record.get("quota") or {}
    value = quota.get("value")
    held = f"{record.get('in_use', '?')}/{'?' if value is None else int(value)} in use"
    return (
        f"needs {record.get('needs', '?')} vCPUs, {held} ({quota.get('code', '?')}), "
        f"waited {record.get('waited_seconds', '?')} s of {record.get('limit_seconds', '?')} s"
    )


def busy_cell(usage: Any) -> str | None:
    """Cores busy while the job compiled: ``0.93 of 16`` (CPU / wall / cores), or None."""
    if not isinstance(usage, dict) or not isinstance(usage.get("cores_busy"), int | float):
        return None
    return f"{float(usage['cores_busy']):.2f} of {usage.get('cores', '?')}"


def cache_cell(manifest: dict[str, Any]) -> str | None:
    """The job's compiler cache in a few characters: hits/lookups (rate), or why there was none."""
    stats = manifest.get("compiler_cache")
    if not isinstance(stats, dict):
        return None
    if stats.get("status") != "used":
        return "off"
    looked = int(stats.get("hits", 0)) + int(stats.get("misses", 0))
    rate = stats.get("hit_rate")
    return f"{stats.get('hits', 0)}/{looked}" + ("" if rate is None else f" ({float(rate):.0%})")


def memory_cell(manifest: dict[str, Any]) -> str | None:
    """The memory each compiler was planned at and whose figure it was, in the runner's log's words
    (wheelfoundry.planning.compiler_memory), or None: no build recorded it."""
    shared = manifest.get("parallelism")
    if not isinstance(shared, dict):
        return None
    gib = shared.get("gib_per_compiler")
    if not isinstance(gib, int | float) or isinstance(gib, bool):
        return None
    return f"{compiler_memory.words(float(gib))} ({shared.get('gib_per_compiler_from') or 'plan'})"


def _is_gpu(instance: dict[str, Any]) -> bool:
    return bool(instance["Tags"].get("wheelfoundry:phase") == "gpu-test")


def run_status(farm: Farm, run: str) -> dict[str, Any]:
    described = farm.describe(run)
    name, status = described["name"], described["status"]
    started = _epoch(described.get("startDate"))
    stopped = _epoch(described.get("stopDate"))
    plan = farm.get_json(f"runs/{name}/plan.json") or {}
    running = status == "RUNNING"
    instances = farm.instances(described["executionArn"]) if plan.get("jobs") else []
    # An extension run's test jobs (the published bytes, after Merge) follow its build jobs; after a layout
    # fallback (wheelfoundry.aws.fallback) the per-cell retests follow those.
    merge = farm.get_json(f"runs/{name}/merge.json") or {}
    retests = (merge.get("fallback") or {}).get("retests") or []
    ids = [*plan.get("jobs", []), *plan.get("tests", []), *retests]
    jobs = [job_row(farm, name, job_id, stopped, instances) for job_id in ids]
    report = farm.get_json(f"runs/{name}/report.json") if not running else None
    failures = run_failures(farm.get_json, name) if report and report.get("failed") else []
    return {
        "run": name,
        "execution_arn": described["executionArn"],
        "status": status,
        "elapsed_seconds": None if started is None else round((stopped or datetime.now(UTC).timestamp()) - started, 1),
        "channel": plan.get("channel"),
        "estimated_usd": plan.get("estimated_usd"),
        "estimated_wall_seconds": None
        if plan.get("estimated_wall_hours") is None
        else round(float(plan["estimated_wall_hours"]) * 3600),
        "estimated_build_hours": plan.get("estimated_instance_hours"),
        "actual_usd": round(sum(j["actual_usd"] or 0 for j in jobs), 4) if jobs else None,
        "jobs": jobs,
        "layout": {"chosen": merge["layout"], "why": merge.get("layout_reason")} if merge.get("layout") else None,
        "error": described.get("error"),
        "cause": described.get("cause"),
        "report": report,
        "failures": [asdict(f) for f in failures],
        "bucket": farm.bucket,
        "public": _public(farm, plan.get("channel"), report),
    }


def _public(farm: Farm, channel: str | None, report: dict[str, Any] | None) -> dict[str, Any] | None:
    """A public channel's URLs, as its users type them (the stack's PublicIndexUrl output)."""
    from wheelfoundry.publishing.edge import public_urls

    outputs = farm.outputs
    index = (report or {}).get("index") or {}
    urls = (outputs.get("PublicIndexUrl", ""), outputs.get("PublicChannels", ""))
    return public_urls(channel or "", *urls, index.get("variants") or [], index.get("variant_indexes") or [])


def render_status(status: dict[str, Any]) -> str:
    jobs = status["jobs"]
    done = sum(1 for j in jobs if j["stage"] == "done")
    head = (
        f"run {status['run']}: {status['status']}, {done}/{len(jobs)} jobs done, "
        f"elapsed {duration(status['elapsed_seconds'])} of an expected {duration(status.get('estimated_wall_seconds'))}"
        f" wall ({status.get('estimated_build_hours') or '-'} build-hours), estimated {usd(status['estimated_usd'])}, "
        f"so far ~{usd(status['actual_usd'])}" + (f", channel {status['channel']}" if status.get("channel") else "")
    )
    lines = [head]
    if status.get("layout"):  # which layout the published wheels have, and why (wheelfoundry.aws.merging)
        lines.append(f"layout {status['layout']['chosen']}: {status['layout']['why']}")
    if status.get("public"):  # anyone installs from it, no AWS account (wheelfoundry.publishing.edge)
        for name, url in (status["public"].get("variant_indexes") or {}).items():  # first: each torch's own build
            lines.append(f"public index for {name}: pip install NAME --index-url {url}")
        lines.append(f"public index: pip install NAME --index-url {status['public']['index_url']}")
        lines += [f"  find-links: pip install NAME -f {url}" for url in status["public"]["find_links"]]
    if jobs:
        rows: list[tuple[object, ...]] = [
            (
                j["job"],
                j["executor"],
                j["state"],
                j["stage"],
                duration(j["elapsed_seconds"]),
                duration(j.get("estimated_seconds")),
                _ratio(j.get("elapsed_seconds"), j.get("estimated_seconds"), j["stage"] == "done"),
                usd(j["estimated_usd"]),
                "~" + usd(j["actual_usd"]),
                j["detail"],
            )
            for j in jobs
        ]
        headers: tuple[str, ...] = (
            *("JOB", "EXECUTOR", "STATE", "STAGE", "ELAPSED", "EXPECTED", "ACT/EST"),
            *("EST.", "ACTUAL", "DETAIL"),
        )
        if any(j.get("gpu_test") for j in jobs):
            rows = [(*row[:-1], j.get("gpu_test") or "-", row[-1]) for row, j in zip(rows, jobs, strict=True)]
            headers = (*headers[:-1], "GPU TEST", headers[-1])
        if any(j.get("compiler_cache") for j in jobs):  # a low rate on a rebuild: the package defeats the cache
            rows = [(*row[:-1], j.get("compiler_cache") or "-", row[-1]) for row, j in zip(rows, jobs, strict=True)]
            headers = (*headers[:-1], "CACHE HITS", headers[-1])
        if any(busy_cell(j.get("compile_usage")) for j in jobs):  # low: the build could use a smaller instance
            cells = [busy_cell(j.get("compile_usage")) or "-" for j in jobs]
            rows = [(*row[:-1], cell, row[-1]) for row, cell in zip(rows, cells, strict=True)]
            headers = (*headers[:-1], "CORES BUSY", headers[-1])
        if any(j.get("compiler_memory") for j in jobs):  # an earlier attempt's peak: a relaunch sized by it
            rows = [(*row[:-1], j.get("compiler_memory") or "-", row[-1]) for row, j in zip(rows, jobs, strict=True)]
            headers = (*headers[:-1], "MEMORY/COMPILER", headers[-1])
        lines.append(table(headers, rows))
    elif status["status"] == "RUNNING":
        lines.append("(validating the request: no jobs yet)")
    lines += archs.lines({j["job"]: {"device_code": j.get("device_code")} for j in jobs})
    lines += abi.lines({j["job"]: {"abi": j.get("abi")} for j in jobs})
    if status.get("error") or status.get("failures"):
        failures = [JobFailure(**{**f, "cause": tuple(f["cause"])}) for f in status.get("failures") or []]
        lines += execution_failure(
            status["status"], status.get("error"), status.get("cause"), failures, status["bucket"]
        )
    return "\n".join(lines)


def _ratio(elapsed: float | None, estimated: float | None, done: bool) -> str:
    """A finished job's actual time against the plan's (``1.30x``: took 30% longer); ``-`` while it runs."""
    if not done or not elapsed or not estimated:
        return "-"
    return f"{elapsed / estimated:.2f}x"


def runs_list(farm: Farm, limit: int) -> list[dict[str, Any]]:
    found = []
    for item in farm.executions(limit):
        plan = farm.get_json(f"runs/{item['name']}/plan.json") or {}
        started, stopped = _epoch(item.get("startDate")), _epoch(item.get("stopDate"))
        found.append(
            {
                "run": item["name"],
                "status": item["status"],
                "started": item["startDate"].isoformat() if isinstance(item.get("startDate"), datetime) else None,
                "elapsed_seconds": None
                if started is None
                else round((stopped or datetime.now(UTC).timestamp()) - started, 1),
                "jobs": len(plan.get("jobs", [])),
                "channel": plan.get("channel"),
                "estimated_usd": plan.get("estimated_usd"),
            }
        )
    return found


def render_runs(runs: list[dict[str, Any]]) -> str:
    if not runs:
        return "no runs yet (`wheelfoundry start REQUEST` starts one)"
    rows = [
        (
            r["run"],
            r["status"],
            (r["started"] or "-")[:19].replace("T", " "),
            duration(r["elapsed_seconds"]),
            r["jobs"],
            r["channel"] or "-",
            usd(r["estimated_usd"]),
        )
        for r in runs
    ]
    return table(("RUN", "OUTCOME", "STARTED (UTC)", "ELAPSED", "JOBS", "CHANNEL", "EST."), rows)
