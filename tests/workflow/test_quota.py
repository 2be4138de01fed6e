"""Issue 32 through the real template and state machine: EC2 vCPU quotas (answered by the embedded
Service Quotas and enforced by its RunInstances, local/wheelfoundry_local/ec2_quotas.py).

- a quota smaller than one job's instance: Validate refuses the run, naming the quota and the numbers,
  and nothing is launched;
- a quota that fits one job at a time: a two-job request succeeds; the second job's launch gets
  MaxSpotInstanceCountExceeded, is retried (VcpuQuotaWait), and `status` shows it waiting meanwhile;
- a job that waits past QuotaWaitSeconds fails with QuotaWaitTimedOut and nothing launched for it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.workflow.conftest import extension_request, launched_by, run, s3_json, source, upload, wait_for
from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_user.farm import Farm
from wheelfoundry_user.status import render_status, run_status

pytestmark = pytest.mark.heavy  # several real builds: `make test-heavy` (.ci/heavy), not `make test`

SPOT_STANDARD = "L-34B43A08"  # the extension hosts (c7i.4xlarge, 16 vCPUs) run on spot by default


def test_a_quota_too_small_for_one_job_is_refused_at_validate(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    aws.quotas.set(SPOT_STANDARD, 8)
    uri = upload(aws, stack, source(tmp_path))
    result = run(aws, stack, extension_request(uri), timeout=120)
    assert result.status == "FAILED" and result.error == "QuotaTooSmall", result
    cause = result.cause or ""
    assert "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests (L-34B43A08) is 8 vCPUs" in cause
    # the build job, or its test job of the published bytes (the same instance type): either never starts
    assert re.search(
        r"wf-tiny-ext-(cpu-x86_64|test-cp311-x86_64) needs 16 \(c7i\.4xlarge\), so it can never start", cause
    )
    assert "aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-34B43A08" in cause
    assert launched_by(aws, result.arn) == [] and aws.quotas.refused == 0  # refused before any launch


def test_a_quota_for_one_job_at_a_time_runs_two_jobs_in_turn(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    aws.quotas.set(SPOT_STANDARD, 16)
    uri = upload(aws, stack, source(tmp_path))
    request = extension_request(uri, torch=["2.14"], cuda=["cpu", "13.0"], arch_list="8.9", layout="per-cell")
    arn = aws.start_execution(stack.state_machine_arn, request, name="quota-two-jobs")
    farm = Farm(stack.name, endpoint_url=aws.endpoint, region=aws.region)

    def waiting() -> str | None:
        shown = render_status(run_status(farm, "quota-two-jobs"))
        return shown if "waiting for vCPU quota" in shown else None

    shown = wait_for(waiting, timeout=600, what="a job waiting for vCPU quota in `status`")
    assert f"needs 16 vCPUs, 16/16 in use ({SPOT_STANDARD})" in shown, shown
    result = aws.wait_execution(arn, timeout=1200)
    assert result.succeeded, result
    report = s3_json(aws, stack, "runs/quota-two-jobs/report.json")
    assert report["failed"] == [] or not report["failed"], report
    instances = launched_by(aws, arn)
    assert len(instances) == 2 and all(i["State"]["Name"] == "terminated" for i in instances)
    # The second launch was refused by the quota and retried, not failed: one instance per job.
    refused = [i for i in aws.invocations.of("LaunchFunction") if i.error_type == "VcpuQuotaWait"]
    assert refused and aws.quotas.refused >= len(refused)
    final = render_status(run_status(farm, "quota-two-jobs"))
    assert "waiting for vCPU quota" not in final and "3/3 jobs done" in final, final  # two builds, then their test job


class TestShortQuotaWait:
    @pytest.fixture
    def parameters(self) -> dict[str, Any]:
        return {"BuildHeartbeatSeconds": "60", "QuotaWaitSeconds": "3"}

    def test_a_job_that_waits_too_long_fails_with_that_cause_and_launches_nothing(
        self, aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
    ) -> None:
        aws.quotas.set(SPOT_STANDARD, 16)
        # Another stack's (or the nightly's) instance holds the whole quota for the length of this run.
        ec2 = aws.client("ec2")
        image = ec2.describe_images()["Images"][0]["ImageId"]
        market = {"MarketType": "spot"}
        held = ec2.run_instances(
            ImageId=image, InstanceType="c7i.4xlarge", MinCount=1, MaxCount=1, InstanceMarketOptions=market
        )["Instances"][0]["InstanceId"]
        try:
            uri = upload(aws, stack, source(tmp_path))
            result = run(aws, stack, extension_request(uri), timeout=300)
        finally:
            ec2.terminate_instances(InstanceIds=[held])
        assert result.status == "FAILED" and result.error == "JobsFailed", result
        cause = result.cause or ""
        assert "QuotaWaitTimedOut" in cause and "gave up waiting for vCPU quota after" in cause, cause
        assert "(QuotaWaitSeconds 3)" in cause and "16 in use" in cause, cause
        assert launched_by(aws, result.arn) == []  # nothing was launched for the job
