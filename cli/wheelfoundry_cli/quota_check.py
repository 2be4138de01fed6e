"""`plan`'s EC2 vCPU quota check: what the plan needs of each quota, judged against values given with
--quota (offline there is no account to read them from; the deployed stack's Validate reads them)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from wheelfoundry.config import FarmConfig
from wheelfoundry.errors import Issue, QuotaTooSmall
from wheelfoundry.planning import quotas
from wheelfoundry.planning.jobs import Job

TEMPLATE_MAX_CONCURRENCY = 10  # template.yaml MaxConcurrentJobs' default


def add_quota_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quota",
        action="append",
        default=[],
        metavar="CODE=VCPUS",
        help="an EC2 vCPU quota's value in your account (e.g. L-1216C47A=32): check the plan against it",
    )
    parser.add_argument(
        "--max-concurrency",
        type=int,
        default=TEMPLATE_MAX_CONCURRENCY,
        help=f"the stack's MaxConcurrentJobs (default {TEMPLATE_MAX_CONCURRENCY}): jobs running at once",
    )


def parse_quotas(given: Sequence[str]) -> dict[str, quotas.Reading]:
    known = {q.code for q in quotas.QUOTAS.values()}
    found, issues = {}, []
    for item in given:
        code, _, value = item.partition("=")
        if code not in known or not value.strip().isdigit():
            issues.append(
                Issue("--quota", "expects CODE=VCPUS with one of the EC2 vCPU quota codes", item, tuple(sorted(known)))
            )
            continue
        found[code] = quotas.Reading(float(value))
    if issues:
        raise QuotaTooSmall(issues)
    return found


def quota_lines(jobs: Sequence[Job], config: FarmConfig, given: Sequence[str], max_concurrency: int) -> list[str]:
    """The check's lines; raises QuotaTooSmall where a given value is smaller than one of the instances."""
    wanted = quotas.needs(jobs, config, max_concurrency)
    if not wanted:
        return ["EC2 vCPU quotas: none used (no EC2 instances in this plan)"]
    readings = parse_quotas(given)
    verdicts = quotas.check(wanted, readings, max_concurrency)
    if issues := quotas.refusals(verdicts):
        raise QuotaTooSmall(issues)
    lines = [f"EC2 vCPU quotas (MaxConcurrentJobs {max_concurrency}):"]
    for verdict in verdicts:
        if verdict.status == "unknown":
            n, code = verdict.need, verdict.need.quota.code
            lines.append(
                f"  {n.quota.name} ({code}): needs {n.largest} vCPUs for one job, {n.peak} for all at once; "
                f"not checked offline (your value: aws service-quotas get-service-quota --service-code ec2 "
                f"--quota-code {code}; then --quota {code}=VALUE)"
            )
        else:
            lines.append(f"  {verdict.line}")
    return lines
