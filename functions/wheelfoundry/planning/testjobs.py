"""Test jobs: the published bytes of an extension run, tested as users get them (DESIGN §10b).

Merge (a Lambda) writes the wheels a run will publish: a merged wheel per (Python, platform), or the
cell wheels themselves. Nothing the build's own smoke test saw is what users install once Merge has
rewritten it, so every wheel to be published is installed from its exact bytes, in a fresh
environment of every cell it claims to serve (that cell's Python and torch from the cell's index),
imported, and its smoke entry points called; only then is it copied into the channel and signed.

One test job per (Python, platform) of the request: it serves every cell of that Python across the
request's torch releases and CUDA variants. It runs on a build host (the planner picks CodeBuild or
EC2 as for builds, with the cached cell environments), through the same Map iteration as a build job,
so the same executors, termination layers and GPU step apply: with ``options.gpu_test`` the GPU step
tests these bytes, not the cell wheels.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from wheelfoundry.config import FarmConfig
from wheelfoundry.planning.jobs import CellSpec, Estimate, Job, PackagePin, SmokeSpec
from wheelfoundry.planning.sizing import choose_instance, ec2_usd_per_hour

TEST_KIND = "test"


def test_job_id(name: str, python: str, platform: str) -> str:
    return f"{name}-test-cp{python.replace('.', '')}-{platform}"


def _estimate(cells: int, job: Job, config: FarmConfig) -> Estimate:
    hours = config.estimates["published_test_setup"] + cells * config.estimates["published_test_per_cell"]
    return Estimate(round(hours, 2), round(hours * ec2_usd_per_hour(job.instance, config), 2))


def plan_tests(builds: tuple[Job, ...], config: FarmConfig) -> tuple[Job, ...]:
    """One test job per (Python, platform) of the extension jobs ``builds``; none for a framework run."""
    groups: dict[tuple[str, str], list[tuple[Job, CellSpec]]] = defaultdict(list)
    for job in builds:
        for cell in (job.extension.serves or job.extension.cells) if job.kind == "extension" and job.extension else ():
            groups[(cell.python, job.platform)].append((job, cell))
    tests = []
    for (python, platform), members in sorted(groups.items()):
        first = members[0][0]
        assert first.extension is not None
        cells = tuple(cell for _, cell in members)
        cuda_jobs = [job for job, _ in members if job.cuda]
        # Installs and imports, a cell at a time per core: the smallest instance type serves it as fast.
        small = config.extension_instances_measured.get(platform, ())
        instance = choose_instance(f"extension-{platform}", small[0] if small else None, first.options.spot, config)
        ext = dataclasses.replace(first.extension, cells=cells, parallel_cells=len(cells))
        pin = first.packages[0]
        gpu = next((job.gpu_test for job in cuda_jobs if job.gpu_test), None)
        job = Job(
            id=test_job_id(ext.name, python, platform),
            kind="test",
            target=f"test-{platform}",
            platform=platform,
            accelerator="cpu",  # imports and smoke entry points run without a GPU; CUDA cells hide it
            cuda=None,
            arch_list=";".join(dict.fromkeys(j.arch_list for j in cuda_jobs if j.arch_list)) or None,
            variant="test",
            python=(python,),
            packages=(PackagePin(pin.name, pin.version, pin.repo, pin.ref, "git", None, (python,)),),
            image=next(j.image for j, _ in members if not j.cuda)
            if any(not j.cuda for j, _ in members)
            else first.image,
            instance=instance,
            env={},
            requirements=(),
            smoke=SmokeSpec(mpi=False, mkldnn=False, cuda_built=bool(cuda_jobs)),
            options=first.options,
            estimate=Estimate(0, 0),
            extension=ext,
            gpu_test=gpu,
        )
        tests.append(dataclasses.replace(job, estimate=_estimate(len(cells), job, config)))
    return tuple(tests)


def without_gpu_tests(builds: tuple[Job, ...]) -> tuple[Job, ...]:
    """An extension's GPU step moves to its test jobs: the cell wheels are not what gets published."""
    return tuple(dataclasses.replace(j, gpu_test=None) if j.kind == "extension" else j for j in builds)
