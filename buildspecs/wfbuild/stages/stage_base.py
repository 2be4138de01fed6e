"""What the stages of every kind of job are made of: the Stage record, the paths stages use, the tools
they call, and the source stages that an extension's build job and its test job share.

wfbuild.stages.stages renders the build jobs (torch and its libraries, extension cells) and
wfbuild.stages.published_stages a test job; both only assemble these. Every untrusted value is checked here
(wfbuild.safety) before it becomes an environment variable or an argv element.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from wfbuild import safety


@dataclass(frozen=True)
class Stage:
    name: str
    argv: list[str]
    env: dict[str, str]  # on top of job["env"] and the package's env
    package: str | None = None
    python: str | None = None
    fatal: bool = True  # a failure stops the job (torch); False: record it and go on (domain libraries)
    host: bool = False  # runs on the host even in container mode (it needs the instance's AWS role)
    always: bool = False  # runs even after a fatal failure (the manifest)
    needs: tuple[str, ...] = field(default=())  # skipped unless all of these succeeded
    group: str | None = None  # an extension cell: its stages run in order, groups side by side
    offline: bool = False  # needs no network (in a container: --network none)
    # Makes a build environment of torch and the cell's tools only (no package's own code or requirements):
    # in a local run's container it may write the machine's cache of them (wfbuild.images.container.CACHE_DIR).
    shared_env: bool = False


# What a cell's build environment holds besides torch (wfbuild.gpu.gpu_runner asks for the same cached env).
CELL_TOOLS = ("setuptools", "wheel", "ninja")


def cp(python: str) -> str:
    return "cp" + safety.check(safety.PYTHON, python, "python").replace(".", "")


class Paths:
    def __init__(self, work: str, bundle: str) -> None:
        self.work, self.bundle = work.rstrip("/") or "/", bundle.rstrip("/") or "/"

    def src(self, pkg: str) -> str:
        return f"{self.work}/src/{pkg}"

    def env(self, python: str) -> str:
        return f"{self.work}/envs/{cp(python)}"

    def raw(self, pkg: str, python: str) -> str:
        return f"{self.work}/dist/raw/{pkg}/{cp(python)}"

    def wheels(self, pkg: str, python: str) -> str:
        return f"{self.work}/dist/wheels/{pkg}/{cp(python)}"

    def script(self, name: str) -> list[str]:
        return ["bash", f"{self.bundle}/stages/{name}"]


def tool(module: str, *args: str) -> list[str]:
    """``python3 -m wfbuild.<module>``: module as its path under wfbuild (``wheels.repair``, ``envs``)."""
    # "python3" is the tools interpreter: the image's tools venv, or the runner's own on a host.
    return ["python3", "-m", f"wfbuild.{module}", *args]


def checkout(p: Paths, name: str, repo: str, ref: str, fatal: bool) -> Stage:
    safety.check(safety.URL, repo, f"{name}.repo")
    safety.check_ref(ref, f"{name}.ref")
    env = {"WF_REPO": repo, "WF_REF": ref, "WF_DEST": p.src(name), "WF_COMMIT_FILE": f"{p.work}/meta/commits/{name}"}
    return Stage(f"checkout-{name}", p.script("checkout.sh"), env, package=name, fatal=fatal)


def cell_key(cell: dict[str, Any]) -> str:
    """The cell's folder under dist/<raw|wheels>/<package>/cpXY/: ``torch2.13.0``."""
    try:
        return f"torch{Version(cell['torch_version'])}"
    except InvalidVersion as exc:
        raise safety.UnsafeValue(f"extension.cells.torch_version: {exc}") from None


def source_stage(p: Paths, ext: dict[str, Any]) -> tuple[Stage, str]:
    """The extension's source stage and the folder its setup.py is in (the subdirectory, if any)."""
    name = safety.check(safety.NAME, ext["name"], "extension.name")
    if ext.get("source_s3"):
        url = safety.check(safety.S3_URL, ext["source_s3"], "extension.source_s3")
        source = Stage("fetch-source", tool("runner.source", "--s3", url, "--dest", p.src(name)), {}, name, host=True)
    else:
        source = checkout(p, name, ext.get("source_git") or "", ext.get("source_ref") or "HEAD", True)
    src = p.src(name)
    if ext.get("subdirectory"):
        src += "/" + safety.check(safety.SUBDIR, ext["subdirectory"], "extension.subdirectory")
    return source, src


def package_tests(p: Paths, ext: dict[str, Any], src: str) -> list[str]:
    """wfbuild.stages.smoke's arguments for the request's "test" (the package's own tests), checked one by one."""
    args = ["--project", p.src(ext["name"]), "--package", src]
    args += [
        f"--test-require={safety.check(safety.REQUIREMENT, r, 'test.requires')}" for r in ext.get("test_requires") or ()
    ]
    return args + [f"--test-arg={safety.check(safety.TEST_ARG, a, 'test.command')}" for a in ext["test_command"]]
