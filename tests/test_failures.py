"""How a failed run is explained (wheelfoundry_user.failures): the stage, the cause lines, the log."""

from __future__ import annotations

import json
from typing import Any

from wheelfoundry_user.failures import cause_lines, execution_failure, run_failures

COMPILE_LOG = """\
[wfbuild 10:00:01] stage build-torch2.13.0-cp311-cpu-x86_64: bash /bundle/stages/build-library.sh
[torch2.13.0-cp311-cpu-x86_64] src/core.c:1:1: error: unknown type name 'this'
[torch2.13.0-cp311-cpu-x86_64] src/core.c:1:9: error: expected '=' before 'not'
[torch2.13.0-cp311-cpu-x86_64] error: command '/usr/bin/gcc' failed with exit code 1
[torch2.13.0-cp311-cpu-x86_64] ERROR: Failed building wheel for wf-tiny-ext
[wfbuild 10:00:09] stage build-torch2.13.0-cp311-cpu-x86_64: failed in 8.1s
[wfbuild 10:00:09] job failed (BuildFailed) at stage build-torch2.13.0-cp311-cpu-x86_64
"""
PYTHON_LOG = """\
Traceback (most recent call last):
  File "/bundle/wfbuild/envs.py", line 52, in find_python
    raise FileNotFoundError(
FileNotFoundError: no Python 3.12 on this machine: install it or set WF_PYTHON_3_12=/path/to/python3.12
manifest: /work/manifest.json (failed, 0 wheel(s))
"""


def test_a_compiler_error_is_the_cause_not_the_tools_complaints_after_it() -> None:
    assert cause_lines(COMPILE_LOG) == (
        "src/core.c:1:1: error: unknown type name 'this'",
        "src/core.c:1:9: error: expected '=' before 'not'",
    )


def test_a_python_error_is_its_verdict_line_not_its_frames() -> None:
    (line,) = cause_lines(PYTHON_LOG)
    assert line.startswith("FileNotFoundError: no Python 3.12 on this machine")


def test_an_out_of_memory_verdict_comes_before_the_compilers_complaints() -> None:
    verdict = (
        "OUT OF MEMORY: cell torch2.11.0-cp312-cuda13.0-x86_64: csrc/bwd.cu (cicc) was killed at 7012 MiB; 1 "
        "compiler(s) held 7012 MiB at once, of 28.0 GiB this instance (32.0 GiB) gives the cell's compilers "
        "(the kernel's OOM killer ended cicc (pid 4242, 7010 MiB resident)); one compiler at once is already "
        "the fewest: the farm relaunches the job on a c7i.8xlarge (64 GiB) with what it learned here"
    )
    log = "[cell] nvcc error   : 'cicc' died due to signal 9 (Kill signal)\n" + COMPILE_LOG + verdict + "\n"
    (line,) = cause_lines(log)
    assert line.startswith("OUT OF MEMORY: cell torch2.11.0-cp312-cuda13.0-x86_64: csrc/bwd.cu (cicc)")


def test_the_toolkit_stages_line_is_the_cause_not_the_stages_after_it() -> None:
    why = (
        "wfbuild.cuda.toolkit: CUDA 13.0 (x86_64): the lock holds no wheels for nvidia-cublas==13.1.0.3; add them "
        "with `python3 tools/lock_cuda.py wheels 13.0 --platform x86_64`"
    )
    log = (
        "[wfbuild 03:53:49] stage toolkit: python3 -m wfbuild.cuda.toolkit --job meta/job.json --root /cache\n"
        f"{why}\n[wfbuild 03:53:49] stage toolkit: failed in 0.6s\n[wfbuild 03:53:50] stage manifest: succeeded in 0.3s\n"
    )
    assert cause_lines(log) == (why,)


def test_without_an_error_line_the_last_line_is_shown() -> None:
    assert cause_lines("step one\nstep two\n") == ("step two",)


def _bucket(objects: dict[str, Any]) -> Any:
    return lambda key: objects.get(key)


def test_a_failed_run_names_the_job_stage_cause_and_log_without_payloads() -> None:
    run, job = "r1", "wf-tiny-ext-cpu-x86_64"
    log_key = f"runs/{run}/jobs/{job}/build.log"
    runner_cause = json.dumps({"job_id": job, "stage": "build-x", "log_key": log_key, "log_tail": COMPILE_LOG})
    lambda_cause = json.dumps({"errorType": "LaunchFailed", "errorMessage": "no capacity", "stackTrace": ["a", "b"]})
    objects = {
        f"runs/{run}/report.json": {
            "failed": [
                {"job_id": job, "error": "BuildFailed", "cause": runner_cause},
                {"job_id": "other", "error": "LaunchFailed", "cause": lambda_cause},
            ]
        },
        f"runs/{run}/jobs/{job}/result.json": {"status": "failed", "error": "BuildFailed", "cause": runner_cause},
    }
    failures = run_failures(_bucket(objects), run)
    text = "\n".join(execution_failure("FAILED", "JobsFailed", "{}", failures, "bkt", local_logs={job: "/tmp/x.log"}))
    assert text.startswith("run FAILED: 2 failure(s)")
    assert f"  {job}: BuildFailed at stage build-x" in text and "src/core.c:1:1: error:" in text
    assert f"log: s3://bkt/{log_key}" in text and "log here: /tmp/x.log" in text
    assert "  other: LaunchFailed\n    no capacity" in text
    assert "stackTrace" not in text and "errorType" not in text and "{" not in text


def test_a_run_refused_before_any_job_shows_the_message() -> None:
    cause = json.dumps(
        {"errorType": "RequestInvalid", "errorMessage": "python[0]: '2.7' is not allowed", "stackTrace": []}
    )
    lines = execution_failure("FAILED", "RequestInvalid", cause, [], "bkt")
    assert lines == ["run FAILED: RequestInvalid", "  python[0]: '2.7' is not allowed"]
