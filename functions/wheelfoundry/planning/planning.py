"""Expand a validated request into jobs, with instances, environment contract and estimates."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import date
from typing import Any

from packaging.version import Version

from wheelfoundry.catalog.catalog import Catalog
from wheelfoundry.catalog.resolve import Resolved, python_for, resolve_version
from wheelfoundry.config import FarmConfig
from wheelfoundry.errors import GuardrailExceeded, Issue
from wheelfoundry.planning import buildenv, framework_wall
from wheelfoundry.planning.executors import assign_all
from wheelfoundry.planning.extensions import plan_extension, sizing_note, sizing_reason
from wheelfoundry.planning.gpu_tests import gpu_guardrail_issues, with_gpu_tests
from wheelfoundry.planning.image_jobs import guardrail_issues as image_guardrail_issues
from wheelfoundry.planning.image_jobs import plan_images
from wheelfoundry.planning.jobs import ImageSpec, Job, PackagePin, SmokeSpec, StackContext, VersionScheme
from wheelfoundry.planning.plan import Plan
from wheelfoundry.planning.sizing import choose_instance, estimate, larger_instance, max_jobs
from wheelfoundry.planning.source_profile import SourceProfile
from wheelfoundry.planning.testjobs import plan_tests, without_gpu_tests
from wheelfoundry.request.model import BuildRequest, ExtensionRequest, PackageSpec, Request, TargetSpec
from wheelfoundry.request.semantics import default_packages
from wheelfoundry.request.targets import target_id, variant


def _pin(
    name: str,
    spec: PackageSpec,
    resolved: Resolved,
    catalog: Catalog,
    label: str,
    pythons: tuple[str, ...],
    today: date,
    accelerator: str,
) -> PackagePin:
    library = catalog.libraries[name]
    env = {**buildenv.library_env(name, accelerator), **library.env}  # library.env: the catalog's switches
    if spec.ref or spec.version:  # explicit: the user names the ref (and maybe the version)
        version = spec.version or spec.ref or ""
        ref = spec.ref or library.tag_for(version)
        scheme: VersionScheme = "fixed" if spec.version else "git"
        build_version = f"{Version(spec.version)}+{label}" if spec.version else None
        return PackagePin(name, version, library.repo, ref, scheme, build_version, pythons, env)
    if name == "torch" and resolved.kind in ("commit", "ref"):
        return PackagePin(name, resolved.spec, library.repo, resolved.spec, "git", None, pythons, env)
    if resolved.kind in ("nightly", "main"):
        moving: VersionScheme = "nightly" if resolved.kind == "nightly" else "git"
        env = {**env, "WF_BUILD_DATE": today.strftime("%Y%m%d")}
        return PackagePin(name, resolved.spec, library.repo, resolved.spec, moving, None, pythons, env)
    exact = resolved.torch_version if name == "torch" else resolved.paired[name]
    assert exact is not None, "resolve_version pairs every release package"
    return PackagePin(
        name, exact, library.repo, library.tag_for(exact), "fixed", f"{Version(exact)}+{label}", pythons, env
    )


def _packages(
    request: BuildRequest, resolved: Resolved, catalog: Catalog, label: str, today: date, accelerator: str
) -> tuple[tuple[PackagePin, ...], list[str]]:
    specs = request.packages or tuple(PackageSpec(n) for n in default_packages(request.version, catalog))
    pins, notes = [], []
    for spec in specs:
        supported = python_for(resolved, spec.name) if spec.name != "torch" else resolved.python
        pythons = (
            tuple(p for p in request.python if p in supported) if not (spec.ref or spec.version) else request.python
        )
        if not pythons:
            notes.append(f"{spec.name}: left out, it supports none of Python {', '.join(request.python)}")
            continue
        skipped = [p for p in request.python if p not in pythons]
        if skipped:
            notes.append(f"{spec.name}: built for Python {', '.join(pythons)} only (not {', '.join(skipped)})")
        pins.append(_pin(spec.name, spec, resolved, catalog, label, pythons, today, accelerator))
    pins.sort(key=lambda p: p.name != "torch")  # torch first: the libraries build against it
    return tuple(pins), notes


def _hours(target: TargetSpec, pins: tuple[PackagePin, ...], config: FarmConfig) -> float:
    est = config.estimates
    kind = {"x86_64": target.accelerator, "aarch64": "aarch64"}[target.platform]
    kind += "_cuda" if target.platform == "aarch64" and target.accelerator == "cuda" else ""
    torch_pythons = len(pins[0].python) if pins and pins[0].name == "torch" else 0
    hours = est["setup"] + (est["torch_first"][kind] if torch_pythons else 0.0)
    hours += max(0, torch_pythons - 1) * est["torch_each_more_python"][kind]
    hours += sum(len(p.python) for p in pins if p.name != "torch") * est["domain_library_per_python"][kind]
    return float(hours)


def _pytorch_job(
    request: BuildRequest,
    target: TargetSpec,
    resolved: Resolved,
    catalog: Catalog,
    config: FarmConfig,
    context: StackContext,
    today: date,
    python: tuple[str, ...] | None = None,
) -> tuple[Job, list[str]]:
    """One target's job; ``python``: only these of the request's Pythons (a layout of one job per Python,
    ``-cpXY`` after the id)."""
    if python is not None:
        request = dataclasses.replace(request, python=python)
    target = with_release_defaults(target, resolved)
    tid = target_id({"platform": target.platform, "accelerator": target.accelerator, "cuda": target.cuda})
    label = variant(target.accelerator, target.cuda)
    pins, notes = _packages(request, resolved, catalog, label, today, target.accelerator)
    kind = f"{target.platform}-{target.accelerator}"
    instance = choose_instance(kind, target.instance_type, request.options.spot, config)
    # as upstream built it for this platform
    toolkit = catalog.toolkit_for(resolved.release, target.cuda, target.platform) if target.cuda else None
    arch_list = (target.arch_list or toolkit.default_arch_list) if toolkit else None
    jobs = max_jobs(instance, target.accelerator, config)
    env = buildenv.torch_env(target, resolved, request.options, arch_list, jobs, context, tid)
    # build_cuda.sh / build_cpu.sh variables, as upstream builds the release
    env.update(catalog.torch_build_env(resolved.release, target.platform, toolkit.version if toolkit else None))
    requirements = (
        catalog.cuda_requirements(resolved.release, toolkit.version, resolved.torch_version, target.platform)
        if toolkit
        else ()
    )
    if requirements:
        env["PYTORCH_EXTRA_INSTALL_REQUIREMENTS"] = " | ".join(requirements)
    job = Job(
        id=f"torch{resolved.label()}-{tid}" + (f"-cp{python[0].replace('.', '')}" if python else ""),
        kind="pytorch",
        target=tid,
        platform=target.platform,
        accelerator=target.accelerator,
        cuda=target.cuda,
        arch_list=arch_list,
        variant=label,
        python=request.python,
        packages=pins,
        image=_release_image(
            buildenv.image_for(target.platform, target.cuda, catalog, config, requirements),
            resolved,
            catalog,
            buildenv.uses_acl(target),
        ),
        instance=instance,
        env=env,
        requirements=requirements,
        smoke=SmokeSpec(mpi=request.options.mpi, mkldnn=bool(target.mkldnn), cuda_built=target.accelerator == "cuda"),
        options=request.options,
        estimate=estimate(_hours(target, pins, config), instance, config),
    )
    return job, [f"{job.id}: {n}" for n in notes]


def framework_jobs(
    request: BuildRequest, catalog: Catalog, config: FarmConfig, context: StackContext, today: date
) -> tuple[tuple[Job, ...], list[str]]:
    """One job per target; with ``options.max_wall_hours`` in the request, the cheapest layout that meets it
    (larger instances, one instance per Python: wheelfoundry.planning.framework_wall), or the fastest, said in
    a note."""
    resolved = resolve_version(request.version, catalog)

    def build(target: TargetSpec, python: tuple[str, ...] | None) -> tuple[Job, list[str]]:
        return _pytorch_job(request, target, resolved, catalog, config, context, today, python)

    if request.wall_target is None:
        built = [build(t, None) for t in request.targets]
        return tuple(job for job, _ in built), [note for _, notes in built for note in notes]
    return framework_wall.layout(request, build, config)


def with_release_defaults(target: TargetSpec, resolved: Resolved) -> TargetSpec:
    """mkldnn left out of the request: as upstream built the release (catalog ``aarch64_mkldnn``; an
    explicit acl true asks for oneDNN, which ACL is used through); the request's own value always wins."""
    if target.mkldnn is not None:
        return target
    upstream = resolved.release.aarch64_mkldnn if resolved.release and target.platform == "aarch64" else True
    return dataclasses.replace(target, mkldnn=bool(target.acl) or upstream)


def _release_image(image: ImageSpec, resolved: Resolved, catalog: Catalog, acl: bool) -> ImageSpec:
    """aarch64: OpenBLAS and ACL at the tags the release was built with (oneDNN needs its ACL); no ACL
    in the image (ACL_VERSION=none) when the build does not use it."""
    if not image.recipe.startswith("aarch64-"):
        return image
    args = {**image.build_args, **catalog.aarch64_build_args(resolved.release)}
    return dataclasses.replace(image, build_args=args if acl else {**args, "ACL_VERSION": "none"})


def guardrail_issues(jobs: tuple[Job, ...], config: FarmConfig) -> list[Issue]:
    rails = config.guardrails
    issues = []
    if len(jobs) > rails.max_jobs:
        issues.append(
            Issue(
                "targets",
                f"{len(jobs)} jobs exceed this stack's limit of {rails.max_jobs} per request",
                len(jobs),
                (f"<= {rails.max_jobs} jobs",),
            )
        )
    hours = round(sum(j.estimate.hours for j in jobs), 2)
    if hours > rails.max_instance_hours:
        issues.append(
            Issue(
                "targets",
                f"an estimated {hours} instance-hours exceed this stack's limit of {rails.max_instance_hours}",
                hours,
                (f"<= {rails.max_instance_hours} instance-hours",),
            )
        )
    return issues


def plan_request(
    request: Request,
    catalog: Catalog,
    config: FarmConfig,
    context: StackContext | None = None,
    today: date | None = None,
    record: Mapping[str, Any] | None = None,
    profile: SourceProfile | None = None,
) -> Plan:
    """The jobs a request runs, each on its executor; RequestInvalid (ExecutorRefused, GuardrailExceeded)
    before anything is launched. ``record``: the extension source's recorded cells (wheelfoundry.planning.calibration);
    ``profile``: what the extension source holds (wheelfoundry.planning.source_profile), for a first run's estimate."""
    context = context or StackContext()
    today = today or date.today()
    costs: dict[str, Any] = {}
    if isinstance(request, ExtensionRequest):
        jobs, notes, costs = plan_extension(request, catalog, config, context, record, profile)
        planned = {job.extension.layout for job in jobs if job.extension is not None}
        if planned == {"per-cell"} and request.layout == "auto":  # a merged wheel over the index's limit
            request = dataclasses.replace(request, layout="per-cell")
        channel = request.channel
    else:
        jobs, notes = framework_jobs(request, catalog, config, context, today)
        channel = request.channel
    jobs = assign_all(jobs, config)  # EC2 or CodeBuild, per job
    jobs = tuple(  # an EC2 build relaunched after an OOM kill at one compiler, or a timeout, takes more memory
        dataclasses.replace(job, retry_instance=larger_instance(job.instance, config)) if job.executor == "ec2" else job
        for job in jobs
    )
    if costs:  # what each job's cells get where its executor runs them, and why its instance type
        notes = [sizing_note(job, costs[job.id], config) for job in jobs] + notes
        jobs = tuple(
            dataclasses.replace(job, executor_reason=job.executor_reason + sizing_reason(job, costs[job.id], config))
            for job in jobs
        )
    notes += [
        f"{job.id}: runs on CodeBuild {job.compute_type}, not on an EC2 instance (plan --explain says why)"
        for job in jobs
        if job.executor == "codebuild"
    ]
    jobs, gpu_notes = with_gpu_tests(jobs, config)
    notes += gpu_notes
    tests = assign_all(plan_tests(jobs, config), config)  # the published bytes, after Merge
    jobs = without_gpu_tests(jobs)
    if isinstance(request, ExtensionRequest) and request.retest:  # stable wheels tested on the cells: no build
        tested = sum(len(t.extension.cells) for t in tests if t.extension)
        notes = [f"retest: no build; {', '.join(request.retest)} tested in {tested} cell environment(s)"]
        jobs = ()
    images = plan_images(request, jobs, config)
    issues = guardrail_issues(jobs, config) + image_guardrail_issues(jobs, images, config)
    issues += gpu_guardrail_issues((*jobs, *tests), config)  # an extension's GPU step runs on its test jobs
    if issues:
        raise GuardrailExceeded(issues)
    lanes = config.guardrails.max_concurrent_jobs
    return Plan(
        request=request, jobs=jobs, notes=tuple(notes), channel=channel, images=images, tests=tests, lanes=lanes
    )
