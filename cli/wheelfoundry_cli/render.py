"""Human-readable plan output for the CLI."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from wheelfoundry.planning.image_jobs import ImageJob
from wheelfoundry.planning.jobs import Job
from wheelfoundry.planning.plan import Plan

HEADERS = ("JOB", "TARGET", "RUNS ON", "PACKAGES", "PYTHON", "HOURS", "USD", "GPU TEST")


def runs_on(job: Job) -> list[str]:
    """``codebuild`` and its compute type, or ``ec2``, the instance type and the market."""
    if job.executor == "codebuild":
        return ["codebuild", job.compute_type or "(project default)"]
    return ["ec2", job.instance.type, "spot" if job.instance.spot else "on-demand"]


def gpu_cell(job: Job) -> list[str]:
    """The GPU test step: instance, GPU, market, hours at most and what they cost at most."""
    test = job.gpu_test
    if test is None:
        return ["-"]
    gpu = f"{test.gpu} sm_{test.capability.replace('.', '')}" + ("" if test.testable else " (not testable)")
    market = "spot" if test.spot else "on-demand"
    return [test.instance_type, gpu, f"{market} <= {test.max_seconds / 3600:.2f} h", f"<= ${test.usd:.2f}"]


def _cells(job: Job) -> tuple[list[str], ...]:
    packages = [f"{p.name} {p.version}" for p in job.packages]
    target = job.target + (f" [{job.arch_list}]" if job.arch_list and job.kind != "test" else "")
    if job.kind == "test" and job.extension is not None:  # the cells it serves; their arch lists are the builds'
        target += " (" + ", ".join(dict.fromkeys(c.build_id.split("-", 1)[1] for c in job.extension.cells)) + ")"
    return (
        [job.id],
        [target],
        runs_on(job),
        packages,
        [" ".join(job.python)],
        [f"{job.estimate.hours:.2f}"],
        [f"{job.estimate.usd:.2f}"],
        gpu_cell(job),
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[list[str]]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], *(len(line) for line in cell))
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        height = max(len(cell) for cell in row)
        for n in range(height):
            parts = [(cell[n] if n < len(cell) else "").ljust(w) for cell, w in zip(row, widths, strict=True)]
            lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


IMAGE_HEADERS = ("IMAGE JOB", "FROM", "RUNS ON", "WHEELS", "TAG", "HOURS", "USD")


def _image_cells(image: ImageJob) -> tuple[list[str], ...]:
    wheels = [
        w.package + (f"=={w.version}" if w.version else "") + (f" [{w.channel}]" if w.channel else "")
        for w in image.wheels
    ] + list(image.pip)
    return (
        [image.id],
        [image.recipe, image.base],
        ["codebuild", image.compute_type, "privileged"],
        wheels,
        [image.tag],
        [f"{image.estimate.hours:.2f}"],
        [f"{image.estimate.usd:.2f}"],
    )


def render_images(plan: Plan) -> list[str]:
    if not plan.images:
        return []
    first = plan.images[0]
    arch = f", TORCH_CUDA_ARCH_LIST={first.arch_list}" if first.arch_list else ""
    return [
        "\n" + table(IMAGE_HEADERS, [_image_cells(i) for i in plan.images]),
        f"\n{len(plan.images)} image job(s) after PublishIndex: user {first.user} ({first.uid}:{first.gid}), "
        f"TZ={first.tz}{arch}; wheels installed with pip --require-hashes (sha256 from the index)",
    ]


LAYOUTS = {
    "auto": "merged (one wheel per Python and platform, the build picked at import) unless a compiled file is a "
    "library the package loads by path; then per-cell wheels with +pt<XY><variant> labels, one index and "
    "find-links page per (torch, CUDA) (decided from the cell wheels, after the build); a merged wheel that "
    "fails the test of its published bytes gives way to the cell wheels, tested again (one more test job each)",
    "merged": "merged (one wheel per Python and platform); refused after the build, publishing nothing, if a "
    "compiled file is a library the package loads by path or the merged wheel fails its test",
    "per-cell": "per-cell wheels, one index and find-links page per (torch, CUDA)",
}


def render_tests(plan: Plan) -> list[str]:
    """The test jobs: the published bytes installed in every cell they serve, before publish and signing."""
    if not plan.tests:
        return []
    layout = getattr(plan.request, "layout", "auto")
    cells = sum(len(t.extension.cells) for t in plan.tests if t.extension)
    test = getattr(plan.request, "test", None)
    own = (
        f"; then the package's own tests in each: python {' '.join(test.command)}"
        + (f" (after pip install {' '.join(test.requires)})" if test.requires else "")
        if test
        else '; no package tests named (request "test")'
    )
    return [
        "\n" + table(HEADERS, [_cells(job) for job in plan.tests]),
        f"\nlayout {layout}: {LAYOUTS.get(layout, layout)}",
        f"published bytes tested: {len(plan.tests)} test job(s), {cells} cell environment(s) (pip install of the "
        f"exact wheel, import, smoke entry points{own}); only what passes is published and signed",
    ]


def wall_lines(plan: Plan) -> list[str]:
    """How the wall time comes about: the longest job, and the target it was planned for (extensions)."""
    if not plan.jobs:
        return []
    longest = max(plan.jobs, key=lambda j: j.estimate.hours)
    lines = [f"wall time: the longest chain is {longest.id} ({longest.estimate.hours:.2f} h)"]
    if len(plan.jobs) > plan.lanes:
        lines[0] += f"; {len(plan.jobs)} jobs over {plan.lanes} at once"
    framework_target = getattr(plan.request, "wall_target", None)
    if any(j.extension is not None for j in plan.jobs) or framework_target is not None:
        target = plan.jobs[0].options.max_wall_hours
        met = "met" if plan.wall_hours <= target else "NOT met (see the note)"
        lines[0] += f"; max_wall_hours {target:g}: {met}"
    return lines


def render_plan(plan: Plan, explain: bool = False) -> str:
    out = [table(HEADERS, [_cells(job) for job in plan.jobs])]
    out += render_tests(plan)
    out += render_images(plan)
    executors = sorted({job.executor for job in plan.jobs})
    out.append(
        f"\n{len(plan.jobs)} job(s) -> channel '{plan.channel}' on {' and '.join(executors) or 'nothing'}; "
        f"estimated wall {plan.wall_hours:.2f} h, {plan.hours:.2f} build-hours, ${plan.usd:.2f} "
        "(EC2: spot by the config's spot_factor, with the root volume; CodeBuild: started minutes x its "
        "per-minute price)"
    )
    out += wall_lines(plan)
    gpu = [j.gpu_test for j in plan.jobs if j.gpu_test]
    if gpu:
        hours, usd = sum(t.max_seconds for t in gpu) / 3600, sum(t.usd for t in gpu)
        out.append(
            f"GPU tests before publishing: {len(gpu)} job(s), at most {hours:.2f} GPU-hours, ${usd:.2f} "
            "(each GPU instance ends when its test does; usually minutes)"
        )
    if explain:
        out += [f"why {job.id}: {job.executor_reason}" for job in (*plan.jobs, *plan.tests)]
    out += [f"note: {note}" for note in plan.notes]
    return "\n".join(out)


def render_dry_run(plan: Plan, explain: bool = False) -> str:
    from wfbuild.stages.stages import render_stages  # the on-instance package ships beside the CLI

    out = [render_plan(plan, explain)]
    for job in plan.jobs:
        contract = job.to_dict()
        out.append(f"\n=== {job.id}")
        out.append(f"runs on: {' '.join(runs_on(job))}")
        out.append(f"image: {job.image.recipe} (FROM {job.image.base}; repaired to {job.image.manylinux})")
        for key, value in sorted(job.image.build_args.items()):
            if key == "CUDA_REQUIREMENTS":  # one library a line: what the toolkit lock installs
                out.append(f"  build-arg {key}: " + ("none" if not value else f"{len(value.splitlines())} line(s)"))
                out += [f"    {line}" for line in value.splitlines()]
            else:
                out.append(f"  build-arg {key}={value}")
        if job.image.build_args.get("CUDA_VERSION"):
            cuda, platform = job.image.build_args["CUDA_VERSION"], job.platform
            out.append(f"CUDA toolkit: buildspecs/images/scripts/cuda/cuda-{cuda}-{platform}.toml (install_cuda.py)")
        if job.requirements:
            out.append("slim CUDA requirements (Requires-Dist of torch):")
            out += [f"  {req}" for req in job.requirements]
        out.append("environment:")
        out += [f"  {key}={shlex.quote(value)}" for key, value in sorted(job.env.items())]
        out.append("stages:")
        for number, stage in enumerate(render_stages(contract), start=1):
            extra = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(stage.env.items()))
            out.append(f"  {number:>2}. [{stage.name}] {extra} {shlex.join(stage.argv)}".rstrip())
    out += _dry_run_images(plan)
    return "\n".join(out)


def _dry_run_images(plan: Plan) -> list[str]:
    from wfbuild.images import image_job, runtime_image  # the on-instance package ships beside the CLI

    out = []
    for image in plan.images:
        contract = image.to_dict()
        try:
            digest = image_job.base_digest(contract, Path(image_job.__file__).resolve().parents[2])
        except LookupError:  # bump_base_images.Unpinned
            digest = ""
        out.append(f"\n=== {image.id}")
        out.append(f"runs on: codebuild {image.compute_type} privileged (after PublishIndex)")
        out += runtime_image.render_job(contract, "<runtime-repository>", digest)
    return out


def abi_lines(stable: Plan, per_torch: Plan) -> list[str]:
    """A stable-ABI plan against the same request built per torch: build cells, test environments, hours, dollars."""

    def figures(plan: Plan) -> str:
        builds = sum(len(j.extension.cells) for j in plan.jobs if j.extension)
        tests = sum(len(t.extension.cells) for t in plan.tests if t.extension)
        return (
            f"{builds} build cell(s) in {len(plan.jobs)} job(s), {tests} test environment(s), "
            f"{plan.hours:.2f} instance-h, {plan.wall_hours:.2f} h wall, {plan.usd:.2f} USD"
        )

    return ["", f"abi stable: {figures(stable)}", f"  per torch: {figures(per_torch)}"]
