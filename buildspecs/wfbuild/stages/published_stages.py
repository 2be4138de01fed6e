"""The stages of a test job (wheelfoundry.planning.testjobs): the staged wheels, fetched as users get them,
installed and smoke-tested in every cell they serve, then one verdict (wfbuild.stages.published)."""

from __future__ import annotations

import dataclasses
from typing import Any

from wfbuild import safety
from wfbuild.stages.stage_base import CELL_TOOLS, Paths, Stage, cell_key, package_tests, source_stage, tool


def published_stages(p: Paths, job: dict[str, Any]) -> list[Stage]:
    """A test job (wheelfoundry.planning.testjobs): the staged wheels installed and smoke-tested in every cell
    they serve."""
    ext, run = job["extension"], job.get("run") or {}
    url = safety.check(safety.S3_PREFIX, f"s3://{run.get('bucket')}/{run.get('prefix')}", "run.prefix")
    fetch = Stage("fetch-staged", tool("stages.published", "fetch", "--s3", url, "--work-dir", p.work), {}, host=True)
    stages: list[Stage] = [fetch]
    tests: list[str] = []
    after: tuple[str, ...] = ()
    if ext.get("test_command"):  # the package's own tests live in its source, not in the wheel
        source, src = source_stage(p, ext)
        stages.append(dataclasses.replace(source, needs=(fetch.name,)))
        tests, after = package_tests(p, ext, src), (source.name,)
    for cell in ext["cells"]:
        python, cid = cell["python"], safety.check(safety.CELL, cell["id"], "extension.cells.id")
        torch = f"torch=={cell_key(cell).removeprefix('torch')}"
        # The very arguments of the build's env stage: the same cached environment, the cell's torch.
        env_argv = ["--python", python, "--dest", f"{p.work}/envs/{cid}", "--torch", torch]
        if cell.get("torch_index_url"):
            env_argv += ["--index-url", safety.check(safety.URL, cell["torch_index_url"], "extension.cells.index")]
        env_argv += [arg for tool in CELL_TOOLS for arg in ("--pip", tool)]
        cuda = cell.get("cuda")
        if cuda:
            env_argv += ["--expect-cuda", safety.check(safety.CUDA, cuda, "extension.cells.cuda")]
        # A cell that did not build has no staged wheel: its stages say so and pass (wfbuild.stages.published.in_cell).
        in_cell = ["stages.published", "cell", "--work-dir", p.work, "--cell", cid, "--tool"]
        env = Stage(
            f"env-{cid}",
            tool(*in_cell, "envs", "--", *env_argv),
            {},
            ext["name"],
            python,
            False,
            needs=(fetch.name,),
            group=cid,
            shared_env=True,
        )
        smoke = ["--python", python, "--wheel-dir", f"{p.work}/published/{cid}", "--work-dir", f"{p.work}/smoke/{cid}"]
        smoke += ["--base-env", f"{p.work}/envs/{cid}"] + (["--cuda-built"] if cuda else [])
        if ext.get("smoke_module"):
            smoke += ["--module", safety.check(safety.MODULE, ext["smoke_module"], "extension.smoke_module")]
        test = Stage(
            f"test-{cid}",
            tool(*in_cell, "smoke", "--", *smoke, *tests),
            {},
            ext["name"],
            python,
            False,
            needs=(env.name, *after),
            group=cid,
        )
        stages += [env, test]
    verdict = tool("stages.published", "verdict", "--work-dir", p.work)
    return [*stages, Stage("verdict", verdict, {}, ext["name"], fatal=False, needs=(fetch.name,), offline=True)]
