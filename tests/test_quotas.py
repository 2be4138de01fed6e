"""Issue 32: EC2 vCPU quotas. Which quota an instance counts against, what a plan needs, the verdicts
Validate and `plan` give, and Launch's wait (VcpuQuotaWait, then QuotaWaitTimedOut) against moto's EC2
with the embedded AWS's quota enforcement (local/wheelfoundry_local/ec2_quotas.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws
from wheelfoundry_cli.main import main as cli

from tests.test_instances import EXECUTION, RUNNING, STACK
from wheelfoundry.aws.instances import LaunchSettings, launch
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.errors import Issue, QuotaTooSmall, QuotaWaitTimedOut, VcpuQuotaWait
from wheelfoundry.planning import quotas
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request
from wheelfoundry_local._moto import Patches
from wheelfoundry_local.ec2_quotas import Ec2Quotas

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("itype", "spot", "code"),
    [
        ("c7i.4xlarge", False, "L-1216C47A"),
        ("c7g.8xlarge", True, "L-34B43A08"),
        ("m7i.8xlarge", False, "L-1216C47A"),
        ("g6.xlarge", False, "L-DB2E81BA"),
        ("g6e.xlarge", True, "L-3819A6DF"),
        ("vt1.3xlarge", False, "L-DB2E81BA"),
        ("p5.4xlarge", False, "L-417A185B"),
        ("p4d.24xlarge", True, "L-7212CCBC"),
    ],
)
def test_quota_for_each_family_and_market(itype: str, spot: bool, code: str) -> None:
    quota = quotas.quota_for(itype, spot)
    assert quota is not None and quota.code == code


@pytest.mark.parametrize("itype", ["inf2.xlarge", "trn1.2xlarge", "x2idn.16xlarge", "f1.2xlarge", "dl1.24xlarge"])
def test_families_without_a_checked_quota(itype: str) -> None:
    assert quotas.quota_for(itype, False) is None


def _plan(cuda: list[str], platforms: list[str], spot: bool = True, gpu: bool = False) -> Any:
    catalog, config = load_catalog(), load_config()
    options: dict[str, Any] = {"executor": "ec2", "spot": spot}
    if gpu:
        options["gpu_test"] = {"instance_type": "g6.xlarge", "spot": False}
    raw = {
        "framework": "extension",
        "name": "ext",
        "source": {"git": "https://example.com/e.git"},
        "torch": ["2.14"],
        "cuda": cuda,
        "python": ["3.11"],
        "platforms": platforms,
        "arch_list": "8.9" if gpu else None,
        "options": options,
    }
    raw = {k: v for k, v in raw.items() if v is not None}
    return plan_request(parse_request(raw, catalog, config), catalog, config)


def test_needs_respect_max_concurrency_and_count_gpu_tests() -> None:
    plan, config = _plan(["cpu", "13.0"], ["x86_64", "aarch64"], gpu=True), load_config()
    by_code = {n.quota.code: n for n in quotas.needs(plan.jobs, config, max_concurrency=10)}
    standard = by_code["L-34B43A08"]  # four 16-vCPU extension hosts on spot
    assert (standard.largest, standard.peak, standard.jobs) == (16, 64, 4)
    one_at_a_time = {n.quota.code: n for n in quotas.needs(plan.jobs, config, max_concurrency=1)}
    assert one_at_a_time["L-34B43A08"].peak == 16
    # An extension's GPU step runs on its test jobs (the published bytes): on-demand g6.xlarge, 4 vCPUs each.
    gpu = {n.quota.code: n for n in quotas.needs([*plan.jobs, *plan.tests], config, 10)}["L-DB2E81BA"]
    tested = [j for j in plan.tests if j.gpu_test is not None and j.gpu_test.testable]
    assert tested and (gpu.largest, gpu.jobs) == (4, len(tested))


def test_verdicts_refuse_wait_or_fit() -> None:
    plan, config = _plan(["cpu", "13.0"], ["x86_64"]), load_config()
    wanted = quotas.needs(plan.jobs, config, 10)
    read = {"L-34B43A08": quotas.Reading(8.0)}
    (refused,) = quotas.check(wanted, read, 10, "us-east-1")
    assert refused.status == "refused"
    assert "(L-34B43A08) is 8 vCPUs" in refused.line and "needs 16 (c7i.4xlarge)" in refused.line
    assert "request-service-quota-increase --service-code ec2 --quota-code L-34B43A08 --desired-value 32" in (
        refused.line
    )
    (issue,) = quotas.refusals([refused])
    assert issue.path == "quota L-34B43A08" and issue.value == 8
    (waits,) = quotas.check(wanted, {"L-34B43A08": quotas.Reading(16.0)}, 10)
    assert waits.status == "waits" and "about 1 job(s) run at a time" in waits.line
    (fits,) = quotas.check(wanted, {"L-34B43A08": quotas.Reading(32.0)}, 10)
    assert fits.status == "fits"
    (unknown,) = quotas.check(wanted, {"L-34B43A08": quotas.Reading(None, "AccessDeniedException: no")}, 10)
    assert unknown.status == "unknown" and "AccessDeniedException" in unknown.line


def test_plan_shows_the_check_offline_and_refuses_a_given_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["plan", "nightly"]) == 0
    out = capsys.readouterr().out
    assert "(L-34B43A08): needs 32 vCPUs for one job, 96 for all at once; not checked offline" in out
    assert cli(["plan", "nightly", "--quota", "L-34B43A08=64"]) == 0
    assert "so about 2 job(s) run at a time" in capsys.readouterr().out
    assert cli(["plan", "nightly", "--quota", "L-34B43A08=16"]) == 2
    err = capsys.readouterr().err
    assert "(L-34B43A08) is 16 vCPUs" in err and "needs 32 (m7i.8xlarge), so it can never start" in err
    assert cli(["plan", "nightly", "--quota", "L-NOPE=1"]) == 2
    assert "--quota: expects CODE=VCPUS" in capsys.readouterr().err


def test_quota_too_small_is_a_request_error() -> None:
    error = QuotaTooSmall([Issue("quota L-1216C47A", "too small", 8)])
    assert error.issues[0].path == "quota L-1216C47A" and "1 problem" in str(error)


@pytest.fixture
def emulated() -> Iterator[tuple[Any, Any, Any, LaunchSettings, Ec2Quotas]]:
    patches, limits = Patches(), Ec2Quotas()
    with mock_aws():
        limits.install(patches)
        try:
            ec2 = boto3.client("ec2", region_name="us-east-1")
            s3 = boto3.client("s3", region_name="us-east-1")
            s3.create_bucket(Bucket="wf-bucket")
            template = ec2.create_launch_template(LaunchTemplateName="lt", LaunchTemplateData={})["LaunchTemplate"]
            settings = LaunchSettings(
                stack=STACK,
                launch_templates={"x86_64": template["LaunchTemplateId"]},
                ami_parameters={"x86_64": "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"},
                subnets=(),
                bucket="wf-bucket",
            )
            yield ec2, boto3.client("ssm", region_name="us-east-1"), s3, settings, limits
        finally:
            patches.undo()


def _event(job_id: str, entered: datetime, wait: int = 600) -> dict[str, Any]:
    job = {
        "id": job_id,
        "prefix": f"runs/run-1/jobs/{job_id}/",
        "platform": "x86_64",
        "instance_type": "c7i.8xlarge",
        "vcpus": 32,
        "spot": False,
        "max_seconds": 3600,
        "quota": {"code": "L-1216C47A", "name": "Running On-Demand Standard", "value": 32.0},
    }
    return {
        "job": job,
        "run": {"id": "run-1"},
        "execution": EXECUTION,
        "entered": entered.isoformat(),
        "quota_wait": wait,
    }


def test_a_quota_exceeded_launch_waits_then_gives_up(emulated: Any) -> None:
    ec2, ssm, s3, settings, limits = emulated
    limits.set("L-1216C47A", 32)
    first = launch(_event("a", NOW), ec2, ssm, RUNNING, settings, NOW, s3)
    assert not first["reused"]
    # The quota holds one c7i.8xlarge: the second job's RunInstances gets VcpuLimitExceeded and waits.
    with pytest.raises(VcpuQuotaWait) as waiting:
        launch(_event("b", NOW), ec2, ssm, RUNNING, settings, NOW + timedelta(seconds=40), s3)
    text = str(waiting.value)
    assert text.startswith("waiting for vCPU quota: b needs 32 vCPUs (c7i.8xlarge, on-demand)")
    assert "(L-1216C47A) is 32 vCPUs, 32 in use; waited 40 s of 600 s (EC2: VcpuLimitExceeded)" in text
    record = json.loads(s3.get_object(Bucket="wf-bucket", Key="runs/run-1/jobs/b/waiting.json")["Body"].read())
    assert (record["needs"], record["in_use"], record["quota"]["code"], record["waited_seconds"]) == (
        32,
        32,
        "L-1216C47A",
        40,
    )
    # Past the run's wait limit: the job fails with the cause, and nothing was launched for it.
    with pytest.raises(QuotaWaitTimedOut, match=r"gave up waiting for vCPU quota after 601 s \(QuotaWaitSeconds 600\)"):
        launch(_event("b", NOW), ec2, ssm, RUNNING, settings, NOW + timedelta(seconds=601), s3)
    ec2.terminate_instances(InstanceIds=[first["instance_id"]])
    second = launch(_event("b", NOW), ec2, ssm, RUNNING, settings, NOW + timedelta(seconds=60), s3)
    assert second["instance_id"] != first["instance_id"] and limits.refused == 2


def test_spot_quota_exceeded_waits_instead_of_falling_back(emulated: Any) -> None:
    ec2, ssm, s3, settings, limits = emulated
    limits.set("L-34B43A08", 16)
    event = _event("s", NOW)
    event["job"] = {**event["job"], "spot": True, "quota": None}
    with pytest.raises(VcpuQuotaWait, match=r"is unknown vCPUs, 0 in use.*MaxSpotInstanceCountExceeded"):
        launch(event, ec2, ssm, RUNNING, settings, NOW, s3)


def test_emulated_service_quotas_answer_ec2_codes(emulated: Any) -> None:
    _, _, _, _, limits = emulated
    limits.set("L-DB2E81BA", 8)
    client = boto3.client("service-quotas", region_name="us-east-1")
    readings = quotas.read(client, ["L-DB2E81BA", "L-1216C47A"])
    assert readings["L-DB2E81BA"].value == 8.0 and readings["L-1216C47A"].value == 4096.0
    with pytest.raises(KeyError, match="not an EC2 vCPU quota"):
        limits.set("L-0263D0A3", 1)
