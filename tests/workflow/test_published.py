"""Publish only what was tested: an extension run's published bytes, through the shipped template and ASL.

After the build jobs, Merge stages what the run will publish (layout auto: merged unless the package loads
a library by path) and the test jobs install those exact bytes with pip in every cell they serve; only what
passed reaches the channel and is signed. Real builds on this host against torch 2.13.0 and 2.14.1 (CPU).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from wheelfoundry_cli.index_server import serving

from tests.workflow.conftest import extension_request, launched_by, run, s3_json, s3_keys, source, upload, wait_for
from tests.workflow.test_merged import user_venv
from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_user.failures import render, run_failures
from wheelfoundry_user.farm import Farm
from wheelfoundry_user.status import render_status, run_status

pytestmark = pytest.mark.heavy  # several real builds: `make test-heavy` (.ci/heavy), not `make test`
ROOT = Path(__file__).resolve().parents[2]
PATHLOAD = ROOT / "tests" / "fixtures" / "pathload_ext"
# The cell wheel finds its module by path, as a FileFinder over EXTENSION_SUFFIXES does: it imports in the
# cell's smoke test, and not from a merged wheel, where the module moved to <dist>.wfbuilds/.
BY_PATH_INIT = """import glob, os
_here = os.path.dirname(__file__)
if not glob.glob(os.path.join(_here, "_core.*.so")):
    raise ImportError(f"Could not find module '_core' in {_here}")
from wf_tiny_ext._core import add
"""


PACKAGE_TESTS = {"requires": ["pytest"], "command": ["-m", "pytest", "-q", "-p", "no:cacheprovider", "{project}/tests"]}
WRONG_TEST = """import torch, wf_pathload


def test_scale_add_matches_torch():
    x = torch.ones(3, dtype=torch.float64)
    assert torch.equal(wf_pathload.scale_add(x, 2.0, 0.5), x * 3.0)
"""


def _run_id(arn: str) -> str:
    return arn.rsplit(":", 1)[1]


def _get_json(aws: EmbeddedAws, bucket: str, key: str) -> object:
    try:
        return json.loads(aws.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
    except Exception:  # absent: what the CLI's reader returns too
        return None


def _test_log(aws: EmbeddedAws, stack: DeployedStack, arn: str, job: str) -> str:
    """The test job's build log, for a failure message."""
    key = f"runs/{_run_id(arn)}/jobs/{job}/build.log"
    try:
        body = aws.client("s3").get_object(Bucket=stack.outputs["WheelBucketName"], Key=key)["Body"].read()
    except Exception as exc:  # no log: say so in the message
        return f"(no log at {key}: {exc})"
    return body.decode(errors="replace")[-6000:]


def _tested_and_published(
    aws: EmbeddedAws, stack: DeployedStack, run_id: str, test_job: str, project: str, version: str
) -> list[str]:
    """The test job passed both cell wheels (torch 2.13 and 2.14), and they are what the channel holds."""
    labels = [f"{version}+pt213cpu", f"{version}+pt214cpu"]
    tested = s3_json(aws, stack, f"runs/{run_id}/jobs/{test_job}/manifest.json")
    assert sorted((w["version"], w["smoke"]) for w in tested["wheels"]) == [(v, "passed") for v in labels]
    wheels = sorted(k for k in s3_keys(aws, stack, f"wheels/ci/{project}/") if k.endswith(".whl"))
    assert [k.rsplit("/", 1)[1].split("-")[1] for k in wheels] == labels
    return wheels


def test_a_path_loading_package_is_published_per_cell_and_imports_after_pip_install(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    uri = upload(aws, stack, PATHLOAD, "wf-pathload")
    request = extension_request(uri, name="wf-pathload", torch=["2.13", "2.14"], test=PACKAGE_TESTS)
    result = run(aws, stack, request, timeout=900)
    log = _test_log(aws, stack, result.arn, "wf-pathload-test-cp311-x86_64")
    assert result.succeeded, log
    # Its own tests (tests/fixtures/pathload_ext/tests, from the sdist) ran against each published wheel.
    assert log.count("ok   package tests: 2 passed") == 2, log
    run_id = _run_id(result.arn)
    report = s3_json(aws, stack, f"runs/{run_id}/report.json")
    assert report["layout"]["chosen"] == "per-cell"
    assert "wf_pathload/_ops_cpu.so is a shared library the package loads by path" in report["layout"]["why"]
    # One build job (both cells on one host) and one test job (Python 3.11): two instances, both ended.
    assert len(launched_by(aws, result.arn, tests=True)) == 2
    wheels = _tested_and_published(aws, stack, run_id, "wf-pathload-test-cp311-x86_64", "wf-pathload", "0.3.0")
    signed = s3_keys(aws, stack, "wheels/ci/wf-pathload/")
    assert all(f"{k}.provenance.json" in signed for k in wheels)
    pages = s3_keys(aws, stack, "simple/ci/torch-")
    assert "simple/ci/torch-2.13.0+cpu.html" in pages and "simple/ci/torch-2.14.1+cpu.html" in pages
    with serving(aws.client("s3"), stack.outputs["WheelBucketName"]) as base:
        for torch in ("2.13.0", "2.14.1"):
            venv = user_venv(aws, torch, tmp_path / f"venv-{torch}")
            find_links = f"{base}/simple/ci/torch-{torch}+cpu.html"
            argv = [str(venv / "bin" / "python"), "-m", "pip", "install", "--isolated", "--no-index"]
            installed = subprocess.run([*argv, "-f", find_links, "wf-pathload"], capture_output=True, text=True)
            assert installed.returncode == 0, installed.stdout + installed.stderr
            code = "import torch, wf_pathload; x = torch.randn(5); print(torch.equal(wf_pathload.scale_add(x, 3.0, 1.0), x * 3.0 + 1.0))"
            out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True)
            assert out.stdout.strip() == "True", out.stderr
            label = f"pt{torch.replace('.', '')[:3]}cpu"
            version = subprocess.run(
                [str(venv / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('wf-pathload'))"],
                capture_output=True,
                text=True,
            )
            assert version.stdout.strip() == f"0.3.0+{label}"


def test_a_merged_wheel_whose_import_fails_is_neither_published_nor_signed(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    folder = source(tmp_path, {"wf_tiny_ext/__init__.py": BY_PATH_INIT})
    uri = upload(aws, stack, folder)
    # Asked for merged explicitly: no fallback to the cell wheels (layout auto's is the next test).
    result = run(aws, stack, extension_request(uri, torch=["2.13", "2.14"], layout="merged"), timeout=900)
    assert result.status == "FAILED" and result.error == "JobsFailed"
    # The build tool's line: the job, the stage, the cause (the wheel, the cell, the ImportError), the log.
    assert "wf-tiny-ext-test-cp311-x86_64" in (result.cause or "")
    run_id = _run_id(result.arn)
    report = s3_json(aws, stack, f"runs/{run_id}/report.json")
    bucket = stack.outputs["WheelBucketName"]
    shown = "\n".join(render(run_failures(lambda key: _get_json(aws, bucket, key), run_id), bucket))
    assert "wf-tiny-ext-test-cp311-x86_64: BuildFailed at stage test-torch2.1" in shown, shown
    assert "PUBLISHED WHEEL FAILED: wf_tiny_ext-0.1.0-cp311-cp311-manylinux" in shown, shown
    assert "check 'import wf_tiny_ext': ImportError: Could not find module '_core'" in shown, shown
    assert f"log: s3://{bucket}/runs/{run_id}/jobs/wf-tiny-ext-test-cp311-x86_64/build.log" in shown
    assert report["layout"]["chosen"] == "merged"
    assert [f["job_id"] for f in report["failed"]] == ["wf-tiny-ext-test-cp311-x86_64"]
    # The cells passed their own smoke tests: the merged bytes are what failed, and nothing of them went out.
    build = s3_json(aws, stack, f"runs/{run_id}/jobs/wf-tiny-ext-cpu-x86_64/manifest.json")
    assert [w["smoke"] for w in build["wheels"]] == ["passed", "passed"]
    assert s3_keys(aws, stack, "wheels/ci/") == []
    assert report["provenance"].get("signed") == []
    assert "fallback" not in s3_json(aws, stack, f"runs/{run_id}/merge.json")
    assert not [i for i in launched_by(aws, result.arn, tests=True) if i["State"]["Name"] != "terminated"]


def test_layout_auto_falls_back_to_the_cell_wheels_when_the_merged_wheel_fails_its_test(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    # The static check passes (its module is a cpython-tagged extension module); only the test of the
    # merged bytes shows that the package finds it by path. That evidence makes auto publish per cell.
    folder = source(tmp_path, {"wf_tiny_ext/__init__.py": BY_PATH_INIT})
    result = run(aws, stack, extension_request(upload(aws, stack, folder), torch=["2.13", "2.14"]), timeout=1200)
    retest = "wf-tiny-ext-test-cp311-x86_64-per-cell"
    assert result.succeeded, (result.cause, _test_log(aws, stack, result.arn, retest))
    run_id, bucket = _run_id(result.arn), stack.outputs["WheelBucketName"]
    report = s3_json(aws, stack, f"runs/{run_id}/report.json")
    assert report["layout"]["chosen"] == "per-cell"
    why = report["layout"]["why"]
    assert why.startswith("the merged wheel failed the test of its published bytes (wf-tiny-ext-test-cp311-x86_64: "), (
        why
    )
    assert "check 'import wf_tiny_ext': ImportError: Could not find module '_core'" in why, why
    fallback = s3_json(aws, stack, f"runs/{run_id}/merge.json")["fallback"]
    assert fallback["retests"] == [retest] and fallback["withdrawn"] == []  # the merged pass published nothing
    # The merged pass's record stays readable; the retest passed the cell wheels, which are what went out.
    first = s3_json(aws, stack, f"runs/{run_id}/jobs/wf-tiny-ext-test-cp311-x86_64/result.json")
    assert first["status"] == "failed" and first["error"] == "BuildFailed"
    wheels = _tested_and_published(aws, stack, run_id, retest, "wf-tiny-ext", "0.1.0")
    assert sorted(report["provenance"]["signed"]) == [k.rsplit("/", 1)[1] for k in wheels]
    # `wheelfoundry status`: the layout and why, and the retest job among the jobs.
    farm = Farm(stack.name, endpoint_url=aws.endpoint, region=aws.region)
    shown = render_status(run_status(farm, run_id))
    assert "layout per-cell: the merged wheel failed the test of its published bytes" in shown, shown
    assert retest in shown, shown
    # Build, merged test, retest: three instances, all ended.
    assert sorted(i["State"]["Name"] for i in launched_by(aws, result.arn, tests=True)) == ["terminated"] * 3
    with serving(aws.client("s3"), bucket) as base:
        venv = user_venv(aws, "2.14.1", tmp_path / "venv")
        argv = [str(venv / "bin" / "python"), "-m", "pip", "install", "--isolated", "--no-index"]
        installed = subprocess.run(
            [*argv, "-f", f"{base}/simple/ci/torch-2.14.1+cpu.html", "wf-tiny-ext"], capture_output=True, text=True
        )
        assert installed.returncode == 0, installed.stdout + installed.stderr
        code = "import wf_tiny_ext, importlib.metadata as m; print(wf_tiny_ext.add(2, 3), m.version('wf-tiny-ext'))"
        out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True)
        assert out.stdout.split() == ["5", "0.1.0+pt214cpu"], out.stderr


def test_a_failed_fallback_signs_and_publishes_nothing(aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path) -> None:
    folder = source(tmp_path, {"wf_tiny_ext/__init__.py": BY_PATH_INIT})
    arn = aws.start_execution(stack.state_machine_arn, extension_request(upload(aws, stack, folder)))
    # The first Merge has staged the merged wheel; the second call (Remerge) fails past its retries.
    wait_for(lambda: aws.invocations.of("MergeFunction"), timeout=600, what="the first Merge")
    aws.faults.inject("MergeFunction", "Boom")
    result = aws.wait_execution(arn, timeout=900)
    assert result.status == "FAILED" and result.error == "JobsFailed"
    assert "merge: Boom" in (result.cause or ""), result.cause
    run_id = _run_id(arn)
    assert s3_json(aws, stack, f"runs/{run_id}/report.json")["provenance"].get("signed") == []
    assert (
        s3_keys(aws, stack, "wheels/ci/") == []
        and s3_keys(aws, stack, f"runs/{run_id}/jobs/{'wf-tiny-ext-test-cp311-x86_64-per-cell'}") == []
    )
    assert sorted(i["State"]["Name"] for i in launched_by(aws, arn, tests=True)) == ["terminated"] * 2


def test_an_explicit_merged_layout_that_cannot_serve_the_package_publishes_nothing(
    aws: EmbeddedAws, stack: DeployedStack
) -> None:
    uri = upload(aws, stack, PATHLOAD, "wf-pathload")
    request = {**extension_request(uri, name="wf-pathload"), "layout": "merged"}
    result = run(aws, stack, request, timeout=900)
    assert result.status == "FAILED" and result.error == "JobsFailed"
    assert "layout 'merged' cannot serve this package: wf_pathload/_ops_cpu.so" in (result.cause or "")
    run_id = _run_id(result.arn)
    assert s3_json(aws, stack, f"runs/{run_id}/merge.json")["test_jobs"] == []
    assert s3_keys(aws, stack, "wheels/ci/") == [] and s3_keys(aws, stack, f"runs/{run_id}/jobs/wf-pathload-test") == [
        f"runs/{run_id}/jobs/wf-pathload-test-cp311-x86_64/job.json"
    ]
    assert len(launched_by(aws, result.arn, tests=True)) == 1  # the build; no test job started


def test_a_merged_wheel_that_passed_is_what_users_install(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    uri = upload(aws, stack, source(tmp_path))
    result = run(aws, stack, extension_request(uri, torch=["2.13", "2.14"]), timeout=900)
    assert result.succeeded, (result.error, result.cause)
    run_id = _run_id(result.arn)
    merge = s3_json(aws, stack, f"runs/{run_id}/merge.json")
    (staged,) = merge["wheels"]
    (key,) = [k for k in s3_keys(aws, stack, "wheels/ci/wf-tiny-ext/") if k.endswith(".whl")]
    body = aws.client("s3").get_object(Bucket=stack.outputs["WheelBucketName"], Key=key)["Body"].read()
    import hashlib

    assert hashlib.sha256(body).hexdigest() == staged["sha256"]  # the tested bytes are the published bytes
    tested = s3_json(aws, stack, f"runs/{run_id}/jobs/wf-tiny-ext-test-cp311-x86_64/manifest.json")
    (entry,) = tested["wheels"]
    assert entry["sha256"] == staged["sha256"] and entry["smoke"] == "passed"
    wheel = tmp_path / key.rsplit("/", 1)[1]
    wheel.write_bytes(body)
    with zipfile.ZipFile(wheel) as zf:
        assert any(n.startswith("wf_tiny_ext.wfbuilds/torch2.14-cpu/") for n in zf.namelist())
    assert f"{key}.provenance.json" in s3_keys(aws, stack, "wheels/ci/wf-tiny-ext/")


def test_a_failed_merge_tests_publishes_and_signs_nothing(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    uri = upload(aws, stack, source(tmp_path))
    aws.faults.inject("MergeFunction", "Boom")  # the Merge state's Catch: straight to Attest, nothing staged
    result = run(aws, stack, extension_request(uri), timeout=900)
    assert result.status == "FAILED" and result.error == "JobsFailed"
    assert "merge: Boom" in (result.cause or ""), result.cause
    run_id = _run_id(result.arn)
    report = s3_json(aws, stack, f"runs/{run_id}/report.json")
    assert report["provenance"].get("signed") == [] and s3_keys(aws, stack, "wheels/ci/") == []
    assert s3_keys(aws, stack, f"runs/{run_id}/jobs/wf-tiny-ext-test-cp311-x86_64/") == [
        f"runs/{run_id}/jobs/wf-tiny-ext-test-cp311-x86_64/job.json"  # planned, never started
    ]
    assert [i["State"]["Name"] for i in launched_by(aws, result.arn, tests=True)] == ["terminated"]


def test_a_wheel_whose_own_tests_fail_is_neither_published_nor_signed(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    folder = tmp_path / "pathload"
    shutil.copytree(PATHLOAD, folder, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    (folder / "tests" / "test_scale_add.py").write_text(WRONG_TEST)  # the package is right, its test is not
    uri = upload(aws, stack, folder, "wf-pathload")
    request = extension_request(uri, name="wf-pathload", torch=["2.13"], test=PACKAGE_TESTS)
    result = run(aws, stack, request, timeout=900)
    assert result.status == "FAILED" and result.error == "JobsFailed"
    run_id, bucket = _run_id(result.arn), stack.outputs["WheelBucketName"]
    shown = "\n".join(render(run_failures(lambda key: _get_json(aws, bucket, key), run_id), bucket))
    assert "wf-pathload-test-cp311-x86_64: BuildFailed at stage test-torch2.13.0-cp311-cpu-x86_64" in shown, shown
    assert "check 'package tests': FAILED" in shown and "test_scale_add_matches_torch" in shown, shown
    build = s3_json(aws, stack, f"runs/{run_id}/jobs/wf-pathload-cpu-x86_64/manifest.json")
    assert [w["smoke"] for w in build["wheels"]] == ["passed"]  # the cell wheel imported: its tests are what failed
    assert s3_keys(aws, stack, "wheels/ci/") == []
    assert s3_json(aws, stack, f"runs/{run_id}/report.json")["provenance"].get("signed") == []
    assert not [i for i in launched_by(aws, result.arn, tests=True) if i["State"]["Name"] != "terminated"]
