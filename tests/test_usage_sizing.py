"""Extension jobs sized by what an earlier build of the same source used (wheelfoundry.usage)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from wheelfoundry_cli.main import recorded_usage

from wheelfoundry.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.errors import RequestInvalid
from wheelfoundry.planning import plan_request
from wheelfoundry.request import parse_request
from wheelfoundry.usage import RecordedUsage, from_manifest, size_extension, usage_key

SOURCE = "s3://my-bucket/sources/e.tar.gz"
REQUEST: dict[str, Any] = {
    "framework": "extension",
    "name": "my-ext",
    "source": {"s3": SOURCE},
    "torch": ["2.13"],
    "cuda": ["cpu"],
    "python": ["3.11"],
}
KEY = usage_key("my-ext", SOURCE, "", "cpu-x86_64")


def record(width: float, cpu: float = 1200.0, stages: int = 1) -> RecordedUsage:
    return RecordedUsage(KEY, cpu, cpu / width / stages, 2, stages, width)


def test_a_one_cell_serial_build_gets_the_smallest_instance_not_16_vcpus() -> None:
    sized = size_extension(1, record(1.0), "x86_64", "cpu", load_config())
    assert (sized.instance.name, sized.parallel_cells) == ("c7i.xlarge", 1)  # 4 vCPUs: the family's smallest
    assert sized.cores_busy == pytest.approx(0.25)  # none keeps 0.9 busy: the busiest, and it says why
    assert "1 cell(s) of 1.0 busy cores" in sized.reason


def test_cells_that_fill_the_cores_keep_at_least_nine_tenths_busy() -> None:
    sized = size_extension(8, record(2.0), "x86_64", "cpu", load_config())
    assert sized.cores_busy >= 0.9 and sized.instance.vcpus == 16  # 8 cells x 2 cores: all at once
    wide = size_extension(6, record(3.7), "x86_64", "cpu", load_config())
    assert wide.cores_busy >= 0.9 and wide.parallel_cells * 3.7 <= wide.instance.vcpus


def test_plan_without_a_record_keeps_the_instance_and_says_what_it_expects() -> None:
    plan = plan_request(parse_request(REQUEST), load_catalog(), load_config())
    (job,) = plan.jobs
    assert job.instance.type == "c7i.4xlarge"
    assert any(
        "expected cores busy 0.06 of 16 vCPUs" in n and "no recorded build of this source" in n for n in plan.notes
    )


def test_plan_with_a_record_sizes_the_job_by_it() -> None:
    plain = plan_request(parse_request(REQUEST), load_catalog(), load_config()).jobs[0]
    usage = {KEY: record(1.0, cpu=600.0)}
    plan = plan_request(parse_request(REQUEST), load_catalog(), load_config(), usage=usage)
    (job,) = plan.jobs
    assert job.instance.type == "c7i.xlarge" and job.env["MAX_JOBS"] == "2"  # memory: 8 GiB less the reserve
    assert job.estimate.usd < plain.estimate.usd
    assert any("c7i.xlarge, expected cores busy 0.25" in n for n in plan.notes)
    other = {usage_key("my-ext", "s3://my-bucket/sources/other.tar.gz", "", "cpu-x86_64"): record(1.0)}
    assert plan_request(parse_request(REQUEST), load_catalog(), load_config(), usage=other).jobs[0].instance.type == (
        "c7i.4xlarge"
    )  # another source's record is not this one's


def test_the_cli_reads_a_manifests_record(tmp_path: Path) -> None:
    manifest = {
        "target": "cpu-x86_64",
        "sources": {"my-ext": {"repo": SOURCE, "ref": ""}},
        "compile_usage": {"cpu_seconds": 80.0, "wall_seconds": 44.0, "cores": 2, "cores_busy": 0.909,
                          "stages": 1, "cores_per_stage": 1.818},
    }  # fmt: skip
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    assert recorded_usage([str(path)]) == {KEY: from_manifest(manifest)}
    path.write_text(json.dumps({**manifest, "compile_usage": None}))
    with pytest.raises(RequestInvalid, match="records no compile usage"):
        recorded_usage([str(path)])
