"""The on-instance runner: ``python -m wfbuild.runner.runner`` (docs/contracts.md §3-4).

Reads job.json from S3, runs the job's stages (in the builder container, or on this host with
``WF_CONTAINER=none``), uploads wheels, ``.metadata``, manifest.json and build.log to the run's
prefix, then calls back: SendTaskSuccess (succeeded/partial) or SendTaskFailure (BuildFailed,
SpotInterrupted). On CodeBuild the token is not in the environment: ``WF_TOKEN_KEY`` names the S3
object that holds it. Without any token it calls nothing back and writes the success payload to
``<prefix>result.json``; the exit status tells.
Exit status: 0 success reported, 1 failure reported, 2 bad configuration, 3 token gone.
A stage's environment is wfbuild.runner.stage_env's, the cells' split and schedule wfbuild.runner.cells', host mode's
toolkit and compiler cache wfbuild.runner.host_mode's, the manifest,
uploads and callback wfbuild.runner.finish's; the Job here holds the job's state and runs its stages.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from wfbuild import hostfiles, hostinfo
from wfbuild.compiling import compile_records, compiler_cache
from wfbuild.cuda import stack_lock
from wfbuild.execute import BuildLog, Runner
from wfbuild.images import container
from wfbuild.runner import callback, cells, compile_memory, credentials, finish, host_mode, manifest, stage_env
from wfbuild.stages.stages import Stage, render_stages

BUNDLE_DEFAULT = Path(__file__).resolve().parents[2]


class Job:
    """One execution of the runner: configuration, clients, log and stage results."""

    def __init__(self, environ: Mapping[str, str], clients: Mapping[str, Any] | None = None) -> None:
        self.environ = dict(environ)
        self.token = environ.get("WF_TASK_TOKEN", "")
        self.bucket, self.job_key = environ["WF_BUCKET"], environ["WF_JOB_KEY"]
        self.work = Path(environ["WF_WORK_DIR"]).resolve()
        self.bundle = Path(environ.get("WF_BUNDLE_DIR") or BUNDLE_DEFAULT).resolve()
        self.mode = environ.get("WF_CONTAINER", "docker")
        if self.mode not in ("docker", "none"):
            raise ValueError(f"WF_CONTAINER must be docker or none, not {self.mode!r}")
        self.region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
        clients = clients or {}
        self.s3 = clients.get("s3") or boto3.client("s3", region_name=self.region)
        self.sfn = clients.get("stepfunctions") or boto3.client("stepfunctions", region_name=self.region)
        self.sts = clients.get("sts") or boto3.client("sts", region_name=self.region)
        self.creds: credentials.JobCredentials | None = None  # the build's own session, after job.json
        token_key = environ.get("WF_TOKEN_KEY", "")
        if token_key and not self.token:  # CodeBuild: the token is kept out of the build's environment and logs
            try:
                self.token = self.s3.get_object(Bucket=self.bucket, Key=token_key)["Body"].read().decode().strip()
            except Exception as exc:  # bad configuration (exit 2); the build-state rule fails the token
                raise ValueError(f"cannot read the task token at s3://{self.bucket}/{token_key}: {exc}") from exc
        self.work.mkdir(parents=True, exist_ok=True)
        self.private = hostfiles.private_dir(self.work)  # never mounted: env files, session, final manifest
        self.log = BuildLog(self.work / "build.log")
        self.runner = Runner(self.log)
        self.prefix = os.path.dirname(self.job_key) + "/"
        self.results: list[dict[str, Any]] = []
        self.job: dict[str, Any] = {}
        self.token_gone = False
        self.threads: list[Any] = []  # heartbeat and spot watch, stopped before the callback
        self.cuda_home: Path | None = None  # host mode: the locked toolkit the stages compile with
        self.cache: compiler_cache.CompilerCache | None = None  # host mode: the job's sccache server
        self.compile = compile_records.CompileRecords(self.work, self.log.note)  # cache stats, CPU usage
        self.builder: dict[str, Any] = {"mode": self.mode}  # the provenance's builder image (manifest "builder")
        self.sources: dict[str, Any] = {}  # read right after each fetch/checkout, before any build code ran
        self._names = itertools.count()
        self.parallelism: dict[str, int | float | str] = {}  # how the cells shared the host (manifest "parallelism")
        self.memory = compile_memory.CompileMemory(self)  # compilers' memory, OOM kills and their retries

    def start_credentials(self) -> None:
        """Mint the job session the stages get instead of this host's role (wfbuild/runner/credentials.py)."""
        env = self.job.get("env", {})
        cache = env.get("SCCACHE_S3_KEY_PREFIX", "") if env.get("SCCACHE_BUCKET") == self.bucket else ""
        policy = credentials.session_policy(self.bucket, self.prefix, cache, self.region)
        role = str(self.job.get("run", {}).get("job_role_arn") or "")
        refresh = float(self.environ.get("WF_CREDENTIALS_REFRESH_SECONDS") or 2400)
        path = self.private / "aws" / "credentials"
        self.creds = credentials.JobCredentials(self.sts, role, self.job["id"], policy, path, self.log.note, refresh)
        self.creds.start()
        self.threads.append(self.creds)

    def keys(self) -> dict[str, str]:
        return {"manifest": f"{self.prefix}manifest.json", "log": f"{self.prefix}build.log"}

    # ----- stages ---------------------------------------------------------------------------------
    def run_stages(self) -> None:
        host = render_stages(self.job, work_dir=str(self.work), bundle_dir=str(self.bundle))
        inside = render_stages(self.job) if self.mode == "docker" else host
        image, fatal_failed = "", False
        problem = hostinfo.platform_problem(self.job["platform"], platform.machine())
        if problem:  # a wheel built here would carry this host's architecture, not the job's
            self.log.note(problem)
            self.results.append(self._result(Stage("preflight", [], {}), "failed", time.monotonic(), None, [], problem))
            fatal_failed = True
        if self.mode == "docker" and any(not s.host for s in host):
            started = time.monotonic()
            try:
                # a CUDA lock of the stack's (the watcher wrote it): the image is made with it, byte-checked
                bundle = stack_lock.image_bundle(stack_lock.s3_get, self.job, self.bundle, self.work)
                image = container.ensure_image(self.job, bundle, self.runner, self.work, self.region, self.environ)
            except (OSError, RuntimeError, stack_lock.StackLockError, BotoCoreError, ClientError) as exc:
                self.log.note(f"no builder image: {exc}")
                self.results.append(self._result(Stage("image", [], {}), "failed", started, None, [], str(exc)))
                fatal_failed = True
            else:
                self.results.append(self._result(Stage("image", [], {}), "succeeded", started, 0, []))
                self.builder |= {"image": image, "digest": container.image_id(image, self.environ)}
        compiles = self.job["kind"] != "test"  # a test job installs wheels; it needs no toolkit
        if compiles:
            self.memory.start()
        if (
            self.mode == "none"
            and compiles
            and self.job["image"]["build_args"].get("CUDA_VERSION")
            and not fatal_failed
        ):
            fatal_failed = not host_mode.install_toolkit(self)
        if self.mode == "none" and not fatal_failed and compiler_cache.wanted(self.job["env"], self.bucket):
            host_mode.start_compiler_cache(self)
        if [s.name for s in host] != [s.name for s in inside]:
            raise RuntimeError("host and container renderings of the stages differ")
        pairs = list(zip(host, inside))  # noqa: B905  (runs on the host's Python 3.9)
        i = 0
        while i < len(pairs):
            if pairs[i][0].group is None:
                fatal_failed = self.step(pairs[i], image, fatal_failed)
                i += 1
                continue
            j = i
            while j < len(pairs) and pairs[j][0].group is not None:
                j += 1
            cells.run_cells(self, pairs[i:j], image, fatal_failed)
            i = j

    def step(
        self, pair: tuple[Stage, Stage], image: str, fatal_failed: bool, extra: dict[str, str] | None = None
    ) -> bool:
        """Run one stage unless aborted, blocked or after a fatal failure; returns the new fatal_failed."""
        stage_host, stage_in = pair
        done = {r["name"]: r["status"] for r in list(self.results)}
        if self.runner.aborted:
            self.results.append(self._result(stage_host, "aborted", time.monotonic(), None, []))
            return fatal_failed
        blocked = [n for n in stage_host.needs if done.get(n) != "succeeded"]
        no_image = self.mode == "docker" and not stage_host.host and not image
        if (fatal_failed and not stage_host.always) or blocked or no_image:
            reason = f"needs {', '.join(blocked)}" if blocked else "an earlier fatal stage failed"
            self.log.note(f"skipping {stage_host.name}: {reason}")
            self.results.append(self._result(stage_host, "skipped", time.monotonic(), None, [], reason))
            return fatal_failed
        if stage_host.always:
            finish.write_results(self)
        status = self.run_one(stage_host, stage_in, image, extra or {})
        return fatal_failed or (status != "succeeded" and stage_host.fatal)

    def run_one(self, stage_host: Stage, stage_in: Stage, image: str, extra: dict[str, str]) -> str:
        in_container = self.mode == "docker" and not stage_host.host
        stage = stage_in if in_container else stage_host
        env = {**stage_env.for_stage(self, stage, in_container), **extra}
        cached = self.cache is not None or (in_container and compiler_cache.wanted(self.job["env"], self.bucket))
        compiling = compile_records.compiles(stage)
        if compiling:  # sccache (a host server, or a stage's own) cannot take -objtemp
            env |= cells.nvcc_env(self, env, extra, cached) | self.memory.env(stage.name)
        argv = self.compile.argv(stage, in_container, cached)
        hook = None
        if in_container:
            name = f"wf-{os.getpid()}-{next(self._names)}"
            env_file = container.write_env_file(self.private / "env" / f"{stage.name}.env", env)
            endpoint = self.environ.get("AWS_ENDPOINT_URL", "")
            argv = container.run_argv(
                image,
                name,
                env_file,
                self.work,
                self.bundle,
                argv,
                endpoint,
                stage.offline,
                cells.limits(self),
                self.private / "aws",
                cache=(folder, stage.shared_env) if (folder := stage_env.container_cache(self)) else None,
            )
            env = {k: v for k, v in self.environ.items() if k != "WF_TASK_TOKEN"}  # the docker CLI's own

            def hook() -> None:
                subprocess.run(["docker", "kill", name], capture_output=True, check=False)

            self.runner.on_abort.append(hook)
        self.log.note(f"stage {stage.name}: {' '.join(stage.argv)}")
        tail: collections.deque[str] = collections.deque(maxlen=120)
        started = time.monotonic()
        code = self.runner.run(argv, env, self.work, tail, f"[{stage.group}] " if stage.group else "")
        if hook is not None:
            self.runner.on_abort.remove(hook)
        cpu = self.compile.collect(stage, in_container)
        memory, oom = self.memory.finished(stage.name, stage.group, code, tail, extra) if compiling else (None, None)
        retry = self.memory.retry(stage.name, stage.group, oom, extra) if oom else None
        status = "succeeded" if code == 0 else ("aborted" if self.runner.aborted else "failed")
        status = "retried" if retry is not None else status  # the same stage follows, with fewer compilers
        error = None if code == 0 else f"exit status {code}" + (f": {tail[-1]}" if tail else "")
        result = self._result(stage, status, started, code, list(tail), error)
        result |= ({"cpu_seconds": cpu} if cpu is not None else {}) | ({"memory": memory} if memory else {})
        result |= {"oom": oom.to_dict()} if oom else {}
        self.results.append(result)
        if retry is not None:
            self.log.note(f"stage {stage.name}: {status} in {result['seconds']:.1f}s")
            return self.run_one(stage_host, stage_in, image, retry)
        if status == "succeeded" and stage.package and stage.name.startswith(("fetch-source", "checkout-")):
            self._snapshot_source(stage.package)
        self.log.note(f"stage {stage.name}: {status} in {result['seconds']:.1f}s")
        return status

    def _result(
        self, stage: Stage, status: str, started: float, code: int | None, tail: list[str], error: str | None = None
    ) -> dict[str, Any]:
        return {
            "name": stage.name,
            "package": stage.package,
            "python": stage.python,
            "group": stage.group,
            "status": status,
            "seconds": round(time.monotonic() - started, 2),
            # Wall-clock times, so overlapping cells can be seen (and measured) in the manifest.
            "started_at": round(time.time() - (time.monotonic() - started), 3),
            "ended_at": round(time.time(), 3),
            "exit_status": code,
            "error": error,
            "log_tail": "\n".join(tail)[-8000:],
        }

    def _snapshot_source(self, package: str) -> None:
        """The package's source as its fetch or checkout recorded it, before later stages (the build's
        own code) could rewrite meta/: what the manifest, and so the signed provenance, will say."""

        def read(path: Path) -> str | None:
            try:
                return hostfiles.read_inside(self.work, path, 1 << 20).decode("utf-8")
            except hostfiles.Missing:
                return None

        try:
            self.sources[package] = manifest.sources(self.job, self.work / "meta", read)[package]
        except (hostfiles.UnsafeFile, ValueError, KeyError) as exc:
            self.log.note(f"source of {package} not recorded: {exc}")


def run(environ: Mapping[str, str] | None = None, clients: Mapping[str, Any] | None = None) -> int:
    environ = os.environ if environ is None else environ
    try:
        job = Job(environ, clients)
    except (KeyError, ValueError) as exc:
        print(f"wfbuild.runner.runner: bad configuration: {exc}", file=sys.stderr)
        return 2
    deadline: threading.Timer | None = None
    if job.token:
        interval = float(environ.get("WF_HEARTBEAT_SECONDS") or 60)
        beat = callback.Heartbeat(job.sfn, job.token, interval, job.log, lambda _code: _gone(job))
        beat.start()
        job.threads.append(beat)
    try:
        body = job.s3.get_object(Bucket=job.bucket, Key=job.job_key)["Body"].read()
        job.job = json.loads(body)
        job.prefix = job.job.get("run", {}).get("prefix") or job.prefix
        job.threads.append(callback.start_log_uploads(job.s3, job.bucket, job.keys()["log"], job.log, environ))
        (job.work / "meta").mkdir(parents=True, exist_ok=True)
        (job.work / "meta" / "job.json").write_bytes(body)
        job.log.note(f"job {job.job['id']} ({job.job['kind']}, {job.job['target']}), mode {job.mode}")
        job.start_credentials()
        if job.job.get("instance", {}).get("spot"):
            spot = callback.SpotWatcher(
                job.log,
                lambda notice: job.runner.abort("SpotInterrupted"),
                environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT"),
                float(environ.get("WF_SPOT_POLL_SECONDS") or 5),
            )
            spot.start()
            job.threads.append(spot)
        # Stop a little before the Build state's own timeout, so the log still reaches S3.
        limit = max(60.0, float(job.job.get("max_seconds") or 8 * 3600) - 300)
        deadline = threading.Timer(limit, job.runner.abort, (finish.TIME_LIMIT,))
        deadline.daemon = True
        deadline.start()
        job.run_stages()
        data: dict[str, Any] | None = finish.load_manifest(job)
        code = finish.finish(job, data)
    except Exception:  # report anything unexpected as a failed build, with its traceback in the log
        job.log.write(traceback.format_exc())
        job.results.append({"name": "runner", "status": "failed"})
        data = None
        if job.job.get("packages"):
            try:
                data = finish.load_manifest(job)
            except Exception:
                job.log.write(traceback.format_exc())
        code = finish.finish(job, data, error="BuildFailed")
    finally:
        for thread in job.threads:
            thread.stopped.set()
        if deadline is not None:
            deadline.cancel()
    failed = code != 0 or (data is not None and data.get("status") == "failed")
    if not (failed and job.job.get("options", {}).get("keep_on_failure")):
        shutil.rmtree(job.work, ignore_errors=True)
        shutil.rmtree(job.private, ignore_errors=True)
    return code


def _gone(job: Job) -> None:
    job.token_gone = True
    job.runner.abort("task token gone")


if __name__ == "__main__":
    raise SystemExit(run())
