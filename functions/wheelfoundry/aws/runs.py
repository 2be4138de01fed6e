"""Validate: turn a request into stored job contracts and the small list the Map iterates."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date
from typing import Any

from wheelfoundry.aws.image_builds import IMAGE_TIMEOUT_SECONDS, image_key
from wheelfoundry.aws.retests import retest_wheels
from wheelfoundry.aws.timing import calibration_key, read_record
from wheelfoundry.catalog import derived
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.catalog.derived import with_derived
from wheelfoundry.config import FarmConfig, load_config
from wheelfoundry.errors import Issue, LaunchFailed, QuotaTooSmall, RequestInvalid
from wheelfoundry.planning import quotas
from wheelfoundry.planning.buildenv import extension_cache_scope
from wheelfoundry.planning.jobs import Job, StackContext
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.model import ExtensionRequest
from wheelfoundry.request.pins import bundle_lacks_locks, job_locks, unbuildable
from wheelfoundry.request.request import parse_request
from wheelfoundry.toolkits import stack_toolkits

# Past the job's own limit the SSM command times out first; this margin lets its event arrive.
BUILD_TIMEOUT_MARGIN_SECONDS = 900


@dataclass(frozen=True)
class ValidateSettings:
    bucket: str
    region: str
    ecr_repository: str
    max_jobs: int
    max_instance_hours: float
    heartbeat_seconds: int
    max_concurrency: int
    runtime_repository: str = ""  # ECR repository URI of runtime images (image jobs)
    # The role each trust class's builds get a per-job session of (docs/security.md section 2).
    framework_job_role: str = ""
    extension_job_role: str = ""
    # One more bucket the extension build roles may read sources from (template ExtensionSourceBucket).
    source_bucket: str = ""
    # Builds run in Docker images built from pinned bases and downloads (False only where the build
    # hosts run stages without containers: the embedded AWS, WF_CONTAINER=none).
    container_builds: bool = True
    # How long a job may wait for EC2 vCPU quota that other instances hold (template QuotaWaitSeconds).
    quota_wait_seconds: int = 21600
    # options.publish: a token secret was deployed; the CodeArtifact repository the Upload role may
    # publish to, "DOMAIN/REPOSITORY@OWNER" (OWNER empty: the stack's account), "" for none.
    publish_secret: bool = False
    publish_codeartifact: str = ""


def trust_class(job: Job) -> str:
    # A test job installs and runs the extension's code: the extension's trust class.
    return "extension" if job.kind in ("extension", "test") else "framework"


def quota_check(jobs: list[Job], config: FarmConfig, client: Any, settings: ValidateSettings) -> list[quotas.Verdict]:
    """Refuses (QuotaTooSmall) a plan with an instance larger than its EC2 vCPU quota; else the verdicts."""
    wanted = quotas.needs(jobs, config, settings.max_concurrency)
    if not wanted:
        return []
    readings = quotas.read(client, [n.quota.code for n in wanted]) if client is not None else {}
    verdicts = quotas.check(wanted, readings, settings.max_concurrency, settings.region)
    if issues := quotas.refusals(verdicts):
        raise QuotaTooSmall(issues)
    return verdicts


def _quota_of(instance_type: str, spot: bool, values: dict[str, float | None]) -> dict[str, Any] | None:
    quota = quotas.quota_for(instance_type, spot)
    return None if quota is None else {"code": quota.code, "name": quota.name, "value": values.get(quota.code)}


def job_summary(job: Job, prefix: str, values: dict[str, float | None] | None = None) -> dict[str, Any]:
    """What a Map iteration carries: small, so a large matrix stays far below the 256 KiB state limit."""
    return {
        "id": job.id,
        "kind": job.kind,  # extension: Collect keeps its cell wheels; test: publishes what passed (testjobs)
        "prefix": prefix,
        "job_key": f"{prefix}job.json",
        "platform": job.platform,
        "executor": job.executor,
        # Extension sources are other people's code: their builds get the extension role (docs/security.md).
        "trust": trust_class(job),
        "instance_type": job.instance.type,
        "spot": job.instance.spot,
        "vcpus": job.instance.vcpus,
        # The EC2 vCPU quota the build instance counts against (Launch names it while the job waits).
        "quota": _quota_of(job.instance.type, job.instance.spot, values or {}),
        "max_seconds": job.max_seconds,
        "timeout_seconds": job.max_seconds + BUILD_TIMEOUT_MARGIN_SECONDS,
        "keep_on_failure": job.options.keep_on_failure,
        # None: no GPU test; else where and how long (the GPU test states read it)
        "gpu_test": gpu_summary(job),
        "retry": retry_summary(job, values or {}),
    }


def retry_summary(job: Job, values: dict[str, float | None]) -> dict[str, Any] | None:
    """What the state machine merges into the job to relaunch it once after CompilerOutOfMemory or
    BuildTimedOut (the RetryOnce and Relaunch states): its larger instance, the next attempt's number (a new
    launch token), and no further retry. None: no relaunch (a CodeBuild or test job)."""
    if job.executor != "ec2" or job.kind == "test":
        return None
    out: dict[str, Any] = {"attempt": 1, "retry": None}
    bigger = job.retry_instance
    if bigger is not None:
        out |= {
            "instance_type": bigger.type,
            "vcpus": bigger.vcpus,
            "quota": _quota_of(bigger.type, job.instance.spot, values),
        }
    return out


def gpu_summary(job: Job) -> dict[str, Any] | None:
    test = job.gpu_test
    if test is None:
        return None
    return {
        "instance_type": test.instance_type,
        "gpu": test.gpu,
        "spot": test.spot,
        "testable": test.testable,
        "max_seconds": test.max_seconds,
        "vcpus": gpu.vcpus if (gpu := load_config().gpu_types.get(test.instance_type)) else 0,
        # the GPU host boots, installs torch and the wheels, then tests: the limit covers all of it
        "timeout_seconds": test.max_seconds + BUILD_TIMEOUT_MARGIN_SECONDS,
    }


def current_bundle(s3: Any, bucket: str) -> tuple[str, dict[str, Any] | None]:
    """The published bundle's key and what it can build images from (None: a bundle from before pins)."""
    try:
        body = s3.get_object(Bucket=bucket, Key="bundles/current.json")["Body"].read()
        pointer = json.loads(body)
        key: str = pointer["key"]
    except Exception as exc:
        raise LaunchFailed(
            f"s3://{bucket}/bundles/current.json is missing or unreadable: the build bundle was not published "
            "(the stack's BuildBundle resource publishes it on deploy)"
        ) from exc
    pins = pointer.get("pins")
    return key, pins if isinstance(pins, dict) else None


def check_source_location(request: Any, settings: ValidateSettings) -> None:
    """An extension's S3 source must be where its build roles may read: the stack bucket's sources/
    prefix or the one bucket the stack was deployed to allow. Refused here, before anything runs,
    instead of as an AccessDenied in the middle of a paid build."""
    uri = getattr(getattr(request, "source", None), "s3", None)
    if not uri:
        return
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    if (bucket == settings.bucket and key.startswith("sources/")) or (bucket and bucket == settings.source_bucket):
        return
    allowed = [f"s3://{settings.bucket}/sources/<key>"]
    if settings.source_bucket:
        allowed.append(f"s3://{settings.source_bucket}/<key>")
    why = f"{uri} is where the build roles cannot read (deploy with ExtensionSourceBucket=<bucket> to allow one more)"
    raise RequestInvalid([Issue("source.s3", why, uri, tuple(allowed))])


def check_publish_target(request: Any, settings: ValidateSettings) -> None:
    """options.publish names what this stack can publish to, or is refused before anything is built."""
    target = request.options.publish
    if target is None:
        return
    if target.codeartifact is not None:
        ca = target.codeartifact
        where, _, owner = settings.publish_codeartifact.partition("@")
        if where == f"{ca.domain}/{ca.repository}" and (ca.owner is None or not owner or ca.owner == owner):
            return
        deployed = settings.publish_codeartifact.rstrip("@") or "none"
        why = (
            f"{ca.domain}/{ca.repository} is not the CodeArtifact repository this stack may publish to ({deployed}); "
            "deploy with PublishCodeArtifactDomain/PublishCodeArtifactRepository"
        )
        raise RequestInvalid([Issue("options.publish.codeartifact", why, target.name, (deployed,))])
    if target.kind != "url" and not settings.publish_secret:
        why = f"{target.name} needs a token: deploy the stack with PublishTokenSecretArn=<secret ARN>"
        raise RequestInvalid([Issue("options.publish", why, target.name)])


def _stack_toolkits(s3: Any, bucket: str) -> dict[str, stack_toolkits.StackToolkit]:
    # here, not at import: aws.toolkits brings the watcher's modules, which Validate's cold start need not load
    from wheelfoundry.aws.toolkits import read_record

    return read_record(s3, bucket)[0]


def validate(
    event: dict[str, Any], s3: Any, settings: ValidateSettings, today: date, service_quotas: Any = None
) -> dict[str, Any]:
    """Validate and plan before anything is written or launched; then store the contracts."""
    catalog = load_catalog()
    raw = event.get("request")
    if derived.wanted(raw, catalog):  # an extension on a torch release the catalog lacks: the watcher's facts
        catalog = with_derived(catalog, derived.read(s3, settings.bucket))
    toolkits: dict[str, stack_toolkits.StackToolkit] = {}
    if stack_toolkits.wanted(raw, catalog):  # a CUDA the catalog lacks: the watcher's locks and their rows
        toolkits = _stack_toolkits(s3, settings.bucket)
        catalog = stack_toolkits.with_stack_toolkits(catalog, toolkits)
    config = load_config().with_guardrails(settings.max_jobs, settings.max_instance_hours, settings.max_concurrency)
    request = parse_request(raw, catalog, config)
    check_source_location(request, settings)
    check_publish_target(request, settings)
    retest = retest_wheels(s3, settings.bucket, request.channel, getattr(request, "retest", ()))
    context = StackContext(settings.bucket, settings.region, settings.ecr_repository)
    bundle_key, pins = current_bundle(s3, settings.bucket)
    source = getattr(request, "source", None)
    recorded_at = calibration_key(extension_cache_scope(source)) if source is not None else None
    record = read_record(s3, settings.bucket, recorded_at) if recorded_at else None
    plan = plan_request(request, catalog, config, context, today, record)
    # Test jobs too: an extension's GPU step runs on them (they follow the builds, so the peak is an upper bound).
    verdicts = quota_check([*plan.jobs, *plan.tests], config, service_quotas, settings)
    values = {v.need.quota.code: v.value for v in verdicts}
    run_id = event["name"]
    # An image the bundle cannot build would be refused on the build host, after the launch was paid for.
    # A CUDA job whose lock is the stack's names it (key, sha256): the runner byte-checks what it downloads.
    bundle_locks = (pins or {}).get("cuda")
    if not toolkits and bundle_lacks_locks(plan.jobs, bundle_locks):  # a catalog CUDA the bundle has no lock for
        toolkits = _stack_toolkits(s3, settings.bucket)
    locks = job_locks(plan.jobs, toolkits, bundle_locks)
    if settings.container_builds and (issues := unbuildable(plan.jobs, plan.images, pins, locks, toolkits)):
        raise RequestInvalid(issues)
    run = {
        "id": run_id,
        "bucket": settings.bucket,
        "channel": plan.channel,
        "region": settings.region,
        "ecr_repository": settings.ecr_repository,
        "bundle_key": bundle_key,
        # Extension runs: Collect keeps the cell wheels, Merge stages what will be published (merged or
        # per-cell, by layout), the test jobs test those bytes and only they publish (testjobs).
        "layout": getattr(plan.request, "layout", "per-cell"),
        "extension": isinstance(plan.request, ExtensionRequest),
        "require_all_cells": bool(getattr(plan.request, "require_all_cells", False)),
        "images": bool(plan.images),  # ImagesOrReport: runtime image jobs after PublishIndex
        "calibration_key": recorded_at,  # Report records this run's extension cells there
        "estimated_wall_hours": plan.wall_hours,  # report.json sets it beside the jobs' actual hours
        # UploadOrImages: the signed wheels go to options.publish after PublishIndex (aws.uploads)
        "upload": plan.request.options.publish is not None,
        "publish": plan.request.options.publish.to_dict() if plan.request.options.publish else None,
        "retest": retest,  # published stable wheels Merge stages for the test jobs instead of builds (aws.retests)
    }
    prefix = f"runs/{run_id}"
    put = s3.put_object
    put(Bucket=settings.bucket, Key=f"{prefix}/request.json", Body=json.dumps(event.get("request"), indent=2))
    put(
        Bucket=settings.bucket,
        Key=f"{prefix}/plan.json",
        Body=json.dumps({**plan.summary(), "quotas": quotas.summary(verdicts)}, indent=2),
    )
    summaries: dict[str, list[dict[str, Any]]] = {"jobs": [], "tests": []}
    for group, planned in (("jobs", plan.jobs), ("tests", plan.tests)):
        for job in planned:
            job_prefix = f"{prefix}/jobs/{job.id}/"
            role = settings.extension_job_role if trust_class(job) == "extension" else settings.framework_job_role
            contract = {"run": {**run, "prefix": job_prefix, "job_role_arn": role}, **job.to_dict()}
            if job.id in locks and group == "jobs":
                contract["toolkit_lock"] = locks[job.id]
            put(Bucket=settings.bucket, Key=f"{job_prefix}job.json", Body=json.dumps(contract, indent=2))
            summaries[group].append(job_summary(job, job_prefix, values))
    images = []
    for image in plan.images:
        key = image_key(run_id, image.id)
        image_run = {**run, "runtime_repository": settings.runtime_repository}
        contract = {**image.to_dict(), "tag": image.tag.format(run=run_id), "run": image_run}
        put(Bucket=settings.bucket, Key=key, Body=json.dumps(contract, indent=2))
        images.append(
            {"id": image.id, "key": key, "compute_type": image.compute_type, "timeout_seconds": IMAGE_TIMEOUT_SECONDS}
        )
    return {
        "run": run,
        "execution": event["execution"],
        "config": {
            "heartbeat_seconds": settings.heartbeat_seconds,
            "runner_heartbeat_seconds": max(1, settings.heartbeat_seconds // 3),
            "max_concurrency": settings.max_concurrency,
            "quota_wait_seconds": settings.quota_wait_seconds,
            "on_demand": {"spot": False},  # merged into a job when spot capacity fails it
        },
        "jobs": summaries["jobs"],
        "test_jobs": summaries["tests"],  # Merge passes on those that have wheels to test
        "estimate": {"instance_hours": plan.hours, "usd": plan.usd, "wall_hours": plan.wall_hours},
        "merge": {"status": "pending" if summaries["tests"] else "not merged"},
        "images": images,
        "image_builds": [],  # BuildImages' results (one per image job) when the run has images
        "upload": {"status": "not requested"},  # the Upload state's result when options.publish names a target
        "fallback": None,  # Attest's MergedWheelFailed when a merged wheel failed its test (wheelfoundry.aws.fallback)
    }
