"""EC2 vCPU quotas: which one an instance counts against, what a plan needs of it, and whether it fits.

EC2 limits running instances per region in vCPUs, one quota per instance family group and market.
A new account's values are often a few dozen vCPUs, so a plan is checked before anything is paid
for: a job whose instance alone exceeds its quota can never start and is refused; a plan that fits
one job at a time but not all at once runs, and its jobs wait their turn at Launch (VcpuQuotaWait).

Quota codes and names: the Service Quotas console's EC2 list; the same code per family and market
is used by determined-ai/determined@d7c551ace2d7e05f8f08572532fd8fcce6322ba8:
harness/determined/deploy/aws/preflight.py (ON_DEMAND_QUOTA_CODES, SPOT_QUOTA_CODES).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from wheelfoundry.config import FarmConfig
from wheelfoundry.errors import Issue
from wheelfoundry.planning.jobs import Job

SERVICE_CODE = "ec2"


@dataclass(frozen=True)
class Quota:
    code: str
    name: str


# (family group, spot) -> quota. Families outside these groups (F, X, Inf, Trn, DL, ...) are not checked.
QUOTAS: Mapping[tuple[str, bool], Quota] = {
    ("standard", False): Quota("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
    ("standard", True): Quota("L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"),
    ("g", False): Quota("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("g", True): Quota("L-3819A6DF", "All G and VT Spot Instance Requests"),
    ("p", False): Quota("L-417A185B", "Running On-Demand P instances"),
    ("p", True): Quota("L-7212CCBC", "All P Spot Instance Requests"),
}
_FAMILY = re.compile(r"^([a-z]+)\d")
_NOT_STANDARD = {"f", "x", "u", "inf", "trn", "dl", "mac", "hpc", "vt", "g", "p"}


def family(instance_type: str) -> str | None:
    """'standard', 'g' or 'p' for the families those quotas cover; None for the others."""
    match = _FAMILY.match(instance_type)
    prefix = match.group(1) if match else ""
    if prefix in ("g", "vt") or (prefix.startswith("g") and prefix not in _NOT_STANDARD):
        return "g"
    if prefix == "p":
        return "p"
    if prefix and prefix not in _NOT_STANDARD and prefix[0] in "acdhimrtz":
        return "standard"
    return None


def quota_for(instance_type: str, spot: bool) -> Quota | None:
    group = family(instance_type)
    return QUOTAS[(group, spot)] if group else None


def increase_command(code: str, desired: int, region: str = "") -> str:
    where = f" --region {region}" if region else ""
    return (
        f"aws service-quotas request-service-quota-increase --service-code {SERVICE_CODE} "
        f"--quota-code {code} --desired-value {desired}{where}"
    )


@dataclass(frozen=True)
class Need:
    """What the plan asks of one quota: its largest instance alone, and the most at once."""

    quota: Quota
    largest: int  # vCPUs of the largest single instance: below this, nothing can ever start
    largest_job: str
    largest_type: str
    peak: int  # vCPUs if MaxConcurrentJobs jobs hold their largest instance of this quota together
    jobs: int  # jobs that use this quota


def _instances(job: Job, config: FarmConfig) -> list[tuple[str, bool, int]]:
    """(type, spot, vCPUs) of each EC2 instance the job may start (its build, then its GPU test)."""
    found: list[tuple[str, bool, int]] = []
    if job.executor == "ec2":
        found.append((job.instance.type, job.instance.spot, job.instance.vcpus))
    test = job.gpu_test
    if test is not None and test.testable:
        gpu = config.gpu_types.get(test.instance_type)
        found.append((test.instance_type, test.spot, gpu.vcpus if gpu else 0))
    return found


def needs(jobs: Iterable[Job], config: FarmConfig, max_concurrency: int) -> list[Need]:
    """Per quota: the largest instance and the peak. A job's build and GPU test never overlap (the build
    instance is ended first), so a job counts with its largest instance of each quota."""
    per: dict[Quota, list[tuple[int, str, str]]] = {}
    for job in jobs:
        mine: dict[Quota, tuple[int, str, str]] = {}
        for itype, spot, vcpus in _instances(job, config):
            quota = quota_for(itype, spot)
            if quota is not None and vcpus > mine.get(quota, (0, "", ""))[0]:
                mine[quota] = (vcpus, job.id, itype)
        for quota, entry in mine.items():
            per.setdefault(quota, []).append(entry)
    result = []
    for quota, entries in per.items():
        entries.sort(reverse=True)
        top = entries[0]
        peak = sum(v for v, _, _ in entries[: max(1, max_concurrency)])
        result.append(Need(quota, top[0], top[1], top[2], peak, len(entries)))
    return sorted(result, key=lambda n: n.quota.code)


@dataclass(frozen=True)
class Reading:
    """A quota's value in this account, or why it could not be read."""

    value: float | None
    why: str = ""


def read(client: Any, codes: Iterable[str]) -> dict[str, Reading]:
    """The account's values (GetServiceQuota answers the default where none was applied); a failed read is
    reported as not checked, never fatal: the launch-time wait still applies."""
    found: dict[str, Reading] = {}
    for code in codes:
        try:
            quota = client.get_service_quota(ServiceCode=SERVICE_CODE, QuotaCode=code)["Quota"]
        except Exception as exc:  # AccessDenied, throttling, an unknown code: the check says it was skipped
            found[code] = Reading(None, f"{type(exc).__name__}: {str(exc)[:160]}")
            continue
        found[code] = Reading(float(quota["Value"]))
    return found


@dataclass(frozen=True)
class Verdict:
    need: Need
    value: float | None
    status: str  # "refused" | "waits" | "fits" | "unknown"
    line: str


def judge(need: Need, reading: Reading | None, max_concurrency: int, region: str = "") -> Verdict:
    q = need.quota
    head = f"{q.name} ({q.code})"
    if reading is None or reading.value is None:
        why = reading.why if reading is not None else "not read"
        return Verdict(
            need, None, "unknown", f"{head}: not checked ({why}); the plan needs {need.largest} to {need.peak} vCPUs"
        )
    value = int(reading.value)
    if value < need.largest:
        line = (
            f"{head} is {value} vCPUs; {need.largest_job} needs {need.largest} ({need.largest_type}), so it can "
            f"never start (the plan needs up to {need.peak} at once). Request an increase: "
            f"{increase_command(q.code, need.peak, region)}"
        )
        return Verdict(need, value, "refused", line)
    if value < need.peak:
        at_once = value // need.largest
        line = (
            f"{head} is {value} vCPUs; the plan needs up to {need.peak} at once "
            f"(MaxConcurrentJobs {max_concurrency}), so about {at_once} job(s) run at a time and the rest wait "
            f"their turn. For all at once: {increase_command(q.code, need.peak, region)}"
        )
        return Verdict(need, value, "waits", line)
    return Verdict(need, value, "fits", f"{head} is {value} vCPUs; the plan needs up to {need.peak}: fits")


def check(wanted: list[Need], readings: Mapping[str, Reading], max_concurrency: int, region: str = "") -> list[Verdict]:
    return [judge(n, readings.get(n.quota.code), max_concurrency, region) for n in wanted]


def refusals(verdicts: Iterable[Verdict]) -> list[Issue]:
    return [Issue(f"quota {v.need.quota.code}", v.line, v.value) for v in verdicts if v.status == "refused"]


def summary(verdicts: Iterable[Verdict]) -> list[dict[str, Any]]:
    """What plan.json records (and `status`/Launch messages quote)."""
    return [
        {
            "code": v.need.quota.code,
            "name": v.need.quota.name,
            "value": v.value,
            "largest": v.need.largest,
            "peak": v.need.peak,
            "status": v.status,
            "line": v.line,
        }
        for v in verdicts
    ]
