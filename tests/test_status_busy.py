"""`wheelfoundry status` shows how busy each job kept its cores while compiling (the manifest's compile_usage)."""

from __future__ import annotations

from typing import Any

from wheelfoundry_user.status import busy_cell, render_status


def _job(name: str, usage: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "job": name,
        "executor": "ec2",
        "state": "succeeded",
        "stage": "done",
        "elapsed_seconds": 600.0,
        "estimated_usd": 0.2,
        "actual_usd": 0.1,
        "detail": "i-0abc c7i.4xlarge",
        "compile_usage": usage,
    }


def test_status_has_a_cores_busy_column_when_a_manifest_recorded_it() -> None:
    usage = {"cpu_seconds": 960.0, "wall_seconds": 1000.0, "cores": 16, "cores_busy": 0.06}
    status = {"run": "r1", "status": "SUCCEEDED", "elapsed_seconds": 900.0, "estimated_usd": 0.4, "actual_usd": 0.2}
    status |= {"jobs": [_job("a-cpu-x86_64", usage), _job("b-cpu-x86_64", None)], "bucket": "b"}
    text = render_status(status)
    header, _rule, first, second = text.splitlines()[1:5]
    assert "CORES BUSY" in header and header.index("CORES BUSY") < header.index("DETAIL")
    assert "0.06 of 16" in first and " - " in second
    assert busy_cell({"cores_busy": "x"}) is None and busy_cell(None) is None
    assert "CORES BUSY" not in render_status({**status, "jobs": [_job("b", None)]})
