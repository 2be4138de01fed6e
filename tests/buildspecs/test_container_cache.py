"""A local run's stage containers and the machine's cache of build environments (wfbuild.images.container.CACHE_DIR):
mounted read-only into every stage, writable only where a stage makes an environment of torch and the cell's
tools; an instance of the farm (no WF_CACHE_DIR) has no such mount."""

from __future__ import annotations

from pathlib import Path

from tests.buildspecs.conftest import BUNDLE
from wfbuild.images import container
from wfbuild.runner import stage_env
from wfbuild.runner.runner import Job
from wfbuild.stages.stages import render_stages
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request

REQUEST = {
    "framework": "extension",
    "name": "wf-example-ops",
    "source": {"s3": "s3://wf-sources/sources/wf-example-ops.tar.gz"},
    "torch": ["2.14"],
    "cuda": ["cpu"],
    "python": ["3.11"],
}


def _job(tmp_path: Path, **extra: str) -> Job:
    environ = {"WF_BUCKET": "b", "WF_JOB_KEY": "runs/r/jobs/j/job.json", "WF_WORK_DIR": str(tmp_path / "w"),
               "WF_BUNDLE_DIR": str(BUNDLE), "WF_CONTAINER": "docker", "AWS_REGION": "us-east-1", **extra}  # fmt: skip
    job = Job(environ, clients={"s3": object(), "stepfunctions": object()})
    (planned,) = plan_request(parse_request(REQUEST), load_catalog(), load_config()).jobs
    job.job = planned.to_dict()
    return job


def test_a_local_runs_env_stage_alone_writes_the_machines_environments(tmp_path: Path) -> None:
    job = _job(tmp_path, WF_CACHE_DIR=str(tmp_path / "cache"))
    stages = {s.name: s for s in render_stages(job.job)}
    (env_stage,) = [s for n, s in stages.items() if n.startswith("env-")]
    (build,) = [s for n, s in stages.items() if n.startswith("build-")]
    assert env_stage.shared_env and not build.shared_env
    folder = stage_env.container_cache(job)
    assert folder == (tmp_path / "cache" / "container-envs").resolve() and folder.is_dir()
    assert stage_env.for_stage(job, env_stage, in_container=True)["WF_CACHE_DIR"] == container.CACHE_DIR
    assert "WF_CACHE_DIR" not in stage_env.for_stage(job, build, in_container=True), "the build's code: read-only"
    env_file = container.write_env_file(tmp_path / "stage.env", {"A": "1"})
    writes = container.run_argv("i", "n", env_file, tmp_path / "w", BUNDLE, ["true"], cache=(folder, True))
    reads = container.run_argv("i", "n", env_file, tmp_path / "w", BUNDLE, ["true"], cache=(folder, False))
    assert f"{folder}:/cache:rw" in writes and f"{folder}:/cache:ro" in reads
    assert not any(a.endswith(":/cache:rw") for a in reads)
    job.log.close()


def test_an_instance_of_the_farm_has_no_shared_environments(tmp_path: Path) -> None:
    job = _job(tmp_path)
    (env_stage,) = [s for s in render_stages(job.job) if s.name.startswith("env-")]
    assert stage_env.container_cache(job) is None
    assert "WF_CACHE_DIR" not in stage_env.for_stage(job, env_stage, in_container=True)
    env_file = container.write_env_file(tmp_path / "stage.env", {"A": "1"})
    argv = container.run_argv("i", "n", env_file, tmp_path / "w", BUNDLE, ["true"])
    assert not any(container.CACHE_DIR in a for a in argv)
    job.log.close()
