"""The GPU test host's program: the GpuTest SSM document runs ``python3 -m wfbuild.gpu.gpu_runner``.

Environment: WF_BUCKET, WF_JOB_KEY, WF_TASK_TOKEN, WF_WORK_DIR (required); WF_HEARTBEAT_SECONDS,
WF_CACHE_DIR (a shared cache of torch environments), WF_GPU_HOST=emulated (the embedded AWS's agent
plays this host on a machine without a GPU; there WF_GPU_PROBE may name another probe script).

For each (Python, torch) group of the job's collected wheels it makes the environment a user would
have (torch from the job's index, its nvidia-* libraries from pip; a framework job's own torch wheel
with its Requires-Dist), installs the wheels into a fresh venv over it and runs wfbuild.gpu.gpu_test
(the extension's own tests too, from its source: the request's ``test`` command where it names one, else
its tests/ folder). The reports go to ``<job prefix>gpu-test.json``
and ``gpu-test.log``; the task token gets the verdict: ``failed`` fails it (GpuTestFailed: nothing of
the job is published); ``passed``, ``not-testable`` and, in emulation only, ``skipped-in-emulation``
succeed. A real GPU host whose torch sees no GPU fails: a broken driver is never a pass.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import boto3
from packaging.utils import parse_wheel_filename

from wfbuild import envs, safety
from wfbuild.execute import BuildLog
from wfbuild.runner import callback
from wfbuild.stages.stages import CELL_TOOLS
from wfbuild.wheels import wheelfile

WHEEL_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,200}\.whl")
SEVERITY = ("failed", "no-device", "not-testable", "passed")


def python_of(wheel: str) -> str:
    """cp312 -> 3.12 (the wheel's first cpXY tag)."""
    for tag in parse_wheel_filename(wheel)[3]:
        if tag.interpreter.startswith("cp") and len(tag.interpreter) > 3:
            return f"{tag.interpreter[2]}.{tag.interpreter[3:]}"
    raise ValueError(f"{wheel}: no CPython tag")


def groups(job: Mapping[str, Any], wheels: list[Path]) -> list[dict[str, Any]]:
    """One test environment per (Python, torch): an extension's cells, or a framework job's Pythons."""
    by_python: dict[str, list[Path]] = {}
    for wheel in wheels:
        by_python.setdefault(python_of(wheel.name), []).append(wheel)
    ext = job.get("extension")
    if not ext:
        return [{"python": py, "torch": None, "wheels": found} for py, found in sorted(by_python.items())]
    out = []
    testing = job.get("kind") == "test"  # the published bytes: a merged wheel (no +label) serves every cell
    for cell in ext["cells"]:
        if testing and not cell.get("cuda"):
            continue  # a CPU cell's torch sees no GPU; the test job already tested it
        label = cell.get("local_label") or ""
        merged = [w for w in by_python.get(cell["python"], []) if testing and "+" not in w.name]
        mine = [w for w in by_python.get(cell["python"], []) if not label or f"+{label}" in w.name] + merged
        if mine:
            index = cell.get("torch_index_url") or ext.get("torch_index_url")
            out.append({"python": cell["python"], "torch": cell["torch_version"], "wheels": mine, "index": index})
    return out


class GpuHost:
    def __init__(self, environ: Mapping[str, str], clients: Mapping[str, Any] | None = None) -> None:
        self.environ = environ
        self.bucket, self.job_key, self.token = environ["WF_BUCKET"], environ["WF_JOB_KEY"], environ["WF_TASK_TOKEN"]
        self.work = Path(environ["WF_WORK_DIR"]).resolve()
        self.emulated = environ.get("WF_GPU_HOST") == "emulated"
        region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
        clients = clients or {}
        self.s3 = clients.get("s3") or boto3.client("s3", region_name=region)
        self.sfn = clients.get("stepfunctions") or boto3.client("stepfunctions", region_name=region)
        self.work.mkdir(parents=True, exist_ok=True)
        self.log = BuildLog(self.work / "gpu-test.log")
        self.prefix = os.path.dirname(self.job_key) + "/"

    def fetch_wheels(self) -> list[Path]:
        """The wheels the build's manifest lists as smoke-tested, each checked against its sha256."""
        folder = self.work / "wheels"
        folder.mkdir(exist_ok=True)
        body = self.s3.get_object(Bucket=self.bucket, Key=f"{self.prefix}manifest.json")["Body"].read()
        found = []
        for entry in json.loads(body).get("wheels", []):
            name = str(entry.get("name", ""))
            if entry.get("smoke") != "passed" or not WHEEL_NAME.fullmatch(name):
                continue
            path = folder / name
            self.s3.download_file(self.bucket, f"{self.prefix}wheels/{name}", str(path))
            if wheelfile.sha256_of(path) != entry.get("sha256"):
                raise ValueError(f"{name}: its bytes are not the ones the manifest lists")
            found.append(path)
        return sorted(found)

    def base_env(self, job: Mapping[str, Any], group: Mapping[str, Any], dest: Path) -> Path:
        cache = self.environ.get("WF_CACHE_DIR")
        cache_dir = Path(cache) if cache else None
        if group["torch"]:
            index = group.get("index") or (job.get("extension") or {}).get("torch_index_url")
            return envs.create(
                dest, group["python"], CELL_TOOLS, torch=f"torch=={group['torch']}", index=index, cache_dir=cache_dir
            )
        torch = next((w for w in group["wheels"] if wheelfile.info(w).project == "torch"), None)
        requirements = None
        if torch is not None:  # a framework job: torch's own dependencies, as pip would install them
            requirements = dest.with_name(dest.name + "-requirements.txt")
            needs = [r for r in wheelfile.info(torch).requires_dist if "extra ==" not in r]
            requirements.write_text("\n".join(needs) + "\n", encoding="utf-8")
        return envs.create(dest, group["python"], (), requirements=requirements, cache_dir=cache_dir)

    def package_tests(self, job: Mapping[str, Any]) -> list[str]:
        """gpu_test's arguments for the package's own tests: the request's ``test`` where it names one (as
        the test job's smoke runs it, now with the GPU visible), else the source's tests/ folder, if any."""
        ext = job.get("extension") or {}
        if not ext.get("source_s3"):
            return []
        url = safety.check(safety.S3_URL, ext["source_s3"], "extension.source_s3")
        dest = self.work / "src"
        subprocess.run([sys.executable, "-m", "wfbuild.runner.source", "--s3", url, "--dest", str(dest)], check=True)
        package = (
            dest / safety.check(safety.SUBDIR, ext["subdirectory"], "extension.subdirectory")
            if ext.get("subdirectory")
            else dest
        )
        if ext.get("test_command"):
            args = ["--project", str(dest), "--package", str(package)]
            args += [f"--test-require={safety.check(safety.REQUIREMENT, r, 'test.requires')}"
                     for r in ext.get("test_requires") or ()]  # fmt: skip
            return args + [
                f"--test-arg={safety.check(safety.TEST_ARG, a, 'test.command')}" for a in ext["test_command"]
            ]
        tests = package / "tests"
        return ["--tests", str(tests)] if tests.is_dir() else []

    def test(self, job: Mapping[str, Any]) -> dict[str, Any]:
        wheels = self.fetch_wheels()
        self.log.note(f"GPU test of {job['id']}: {len(wheels)} wheel(s), arch list {job.get('arch_list')}")
        tests = self.package_tests(job)
        reports = []
        for i, group in enumerate(groups(job, wheels)):
            folder = self.work / f"group{i}"
            (folder / "wheels").mkdir(parents=True)
            for wheel in group["wheels"]:
                shutil.copy2(wheel, folder / "wheels" / wheel.name)
            base = self.base_env(job, group, folder / "base")
            argv = ["--wheel-dir", str(folder / "wheels"), "--arch-list", str(job.get("arch_list") or "")]
            argv += ["--work-dir", str(folder / "run"), "--report", str(folder / "report.json")]
            argv += ["--base-python", str(base / "bin" / "python"), *tests]
            if self.emulated and self.environ.get("WF_GPU_PROBE"):
                argv += ["--probe", self.environ["WF_GPU_PROBE"]]
            proc = subprocess.run([sys.executable, "-m", "wfbuild.gpu.gpu_test", *argv], capture_output=True, text=True)
            self.log.write((proc.stdout + proc.stderr).rstrip())
            report = json.loads((folder / "report.json").read_text())
            reports.append({"python": group["python"], "torch": group["torch"], **report})
        return self.verdict(reports)

    def verdict(self, reports: list[dict[str, Any]]) -> dict[str, Any]:
        if not reports:
            return {"verdict": "failed", "detail": "no wheel of this job to test", "groups": []}
        worst = min(reports, key=lambda r: SEVERITY.index(r["verdict"]))
        verdict = worst["verdict"]
        if verdict == "no-device":
            verdict = "skipped-in-emulation" if self.emulated else "failed"
        gpu = next((r["gpu"] for r in reports if r.get("gpu")), "")
        detail = worst.get("detail", "") if verdict != "skipped-in-emulation" else "no GPU in the embedded AWS"
        return {"verdict": verdict, "gpu": gpu, "detail": detail, "groups": reports}


def run(environ: Mapping[str, str] | None = None, clients: Mapping[str, Any] | None = None) -> int:
    host = GpuHost(os.environ if environ is None else environ, clients)
    beat = callback.Heartbeat(
        host.sfn, host.token, float(host.environ.get("WF_HEARTBEAT_SECONDS") or 60), host.log, lambda _c: None
    )
    beat.start()
    try:
        job = json.loads(host.s3.get_object(Bucket=host.bucket, Key=host.job_key)["Body"].read())
        result = host.test(job)
    except Exception as exc:  # anything unexpected is a failed test, with its traceback in the log
        host.log.write(traceback.format_exc())
        result = {"verdict": "failed", "detail": f"{type(exc).__name__}: {exc}", "groups": []}
    finally:
        beat.stopped.set()
    keys = {"report_key": f"{host.prefix}gpu-test.json", "log_key": f"{host.prefix}gpu-test.log"}
    host.log.note(f"GPU test verdict: {result['verdict']} {result.get('gpu', '')}: {result.get('detail', '')}")
    host.s3.put_object(Bucket=host.bucket, Key=keys["report_key"], Body=json.dumps(result, indent=1).encode())
    host.log.close()
    host.s3.upload_file(str(host.log.path), host.bucket, keys["log_key"])
    short = {k: result.get(k, "") for k in ("verdict", "gpu", "detail")} | keys
    if result["verdict"] == "failed":
        where = result.get("gpu") or "the GPU host"
        cause = f"GPU test failed on {where}: {result.get('detail', '')}\n{host.log.tail_text(40)}"
        host.sfn.send_task_failure(taskToken=host.token, error="GpuTestFailed", cause=cause[-callback.CAUSE_LIMIT :])
        return 1
    host.sfn.send_task_success(taskToken=host.token, output=json.dumps(short))
    return 0


if __name__ == "__main__":
    raise SystemExit(run())
