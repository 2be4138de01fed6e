"""The GPU test step in the plan: which CUDA jobs get one, on what GPU, at what cost, within what cap.

The arch rule is NVIDIA's (the same as buildspecs/wfbuild/cuda/archrule.py, which gpu_probe.py applies on the GPU
host with the standard library alone; tests/test_gpu_tests.py holds the two to the same answers).
"""

from __future__ import annotations

import dataclasses

from wheelfoundry.config import FarmConfig
from wheelfoundry.errors import Issue
from wheelfoundry.planning.jobs import GpuTestPlan, Job
from wheelfoundry.request.targets import ARCH, split_arch_list


def covers(arch_list: str, capability: tuple[int, int]) -> bool:
    """SASS X.Y runs on X.Z, Z >= Y (an 'a' build on X.Y alone); PTX X.Y on any GPU from X.Y up, except
    arch-specific ('a') PTX, which runs on X.Y alone, and family-specific ('f') PTX, within its major."""
    for item in split_arch_list(arch_list):  # the arch lists Validate accepted (wheelfoundry.request.targets)
        match = ARCH.match(item)
        if not match:
            continue
        major, minor = (int(part) for part in match["base"].split("."))
        arch = (major, minor)
        if arch == capability or (match["suffix"] != "a" and major == capability[0] and minor <= capability[1]):
            return True
        if match["ptx"] and not match["suffix"] and arch <= capability:
            return True
    return False


def gpu_test_for(job: Job, config: FarmConfig) -> GpuTestPlan | None:
    option = job.options.gpu_test
    if option is None or not job.cuda or job.platform != "x86_64":
        return None  # CPU jobs have nothing to test on a GPU; aarch64 GPU hosts (Grace) are not offered
    kind = config.gpu_types[option.instance_type]
    price = kind.usd_per_hour * (config.spot_factor if option.spot else 1.0)
    return GpuTestPlan(
        instance_type=kind.name,
        gpu=kind.gpu,
        capability="{}.{}".format(*kind.capability),
        spot=option.spot,
        max_seconds=int(option.max_hours * 3600),
        usd=round(price * option.max_hours, 2),
        testable=covers(job.arch_list or "", kind.capability),
    )


def with_gpu_tests(jobs: tuple[Job, ...], config: FarmConfig) -> tuple[tuple[Job, ...], list[str]]:
    planned = tuple(dataclasses.replace(job, gpu_test=gpu_test_for(job, config)) for job in jobs)
    notes = []
    for job in planned:
        test = job.gpu_test
        if test and not test.testable:
            notes.append(
                f"{job.id}: not testable on {test.gpu} (sm_{test.capability.replace('.', '')}): its arch list "
                f"{job.arch_list} holds no code for it; the GPU step reports that instead of a pass "
                "(options.gpu_test.instance_type picks another GPU)"
            )
    asked = any(j.options.gpu_test for j in jobs)
    if asked and not any(j.gpu_test for j in planned):
        notes.append("options.gpu_test: no x86_64 CUDA job in this request, so nothing is tested on a GPU")
    return planned, notes


def gpu_guardrail_issues(jobs: tuple[Job, ...], config: FarmConfig) -> list[Issue]:
    hours = round(sum(j.gpu_test.max_seconds for j in jobs if j.gpu_test) / 3600, 2)
    cap = config.guardrails.max_gpu_hours
    if hours <= cap:
        return []
    why = f"GPU tests of up to {hours} GPU-hours exceed this stack's limit of {cap} per run"
    return [Issue("options.gpu_test.max_hours", why, hours, (f"<= {cap} GPU-hours",))]
