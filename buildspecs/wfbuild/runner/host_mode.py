"""Host mode (``WF_CONTAINER=none``): what the builder image gives a container, installed on this host
from the same locks: the CUDA toolkit (the image stage's twin) and one sccache server for the job."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from wfbuild.compiling import compiler_cache
from wfbuild.cuda import stack_lock, toolkit
from wfbuild.runner import stage_env
from wfbuild.stages.stages import Stage

if TYPE_CHECKING:
    from wfbuild.runner.job import Job


def cache_root(job: Job) -> Path:
    """Where host mode keeps what outlives the job (toolkits, sccache): the shared cache, else the work dir."""
    return Path(job.environ["WF_CACHE_DIR"]) if job.environ.get("WF_CACHE_DIR") else job.work


def start_compiler_cache(job: Job) -> None:
    """sccache from the bundle's hash lock, one server for the job (never fatal)."""
    root = cache_root(job)
    binary = compiler_cache.install(job.bundle, root, lambda argv: subprocess.run(argv, check=False).returncode)
    if binary is None:
        job.log.note("warning: sccache could not be installed from its lock: compiling without a cache")
        return
    cache = compiler_cache.CompilerCache(str(binary), job.work, job.log.note)
    cache.start(stage_env.for_stage(job, Stage("sccache", [], {}), False))
    job.cache = cache  # not running: the stages lose the launcher variables and compile directly


def install_toolkit(job: Job) -> bool:
    """The image's CUDA toolkit lock, installed under the cache; False when its stage failed."""
    root = cache_root(job)
    argv = ["python3", "-m", "wfbuild.cuda.toolkit", "--job", str(job.work / "meta" / "job.json"), "--root", str(root)]
    stage = Stage("toolkit", argv, {}, host=True)
    if job.run_one(stage, stage, "", {}) != "succeeded":
        return False
    cuda, platform_ = str(job.job["image"]["build_args"]["CUDA_VERSION"]), job.job["platform"]
    locks = stack_lock.folder(job.job, root)  # the stack's lock the stage fetched and byte-checked, if any
    job.cuda_home = toolkit.prefix_for(job.bundle, cuda, platform_, toolkit.requirements_of(job.job), root, locks)
    return True
