"""Container mode: the builder image (pull or build + push) and ``docker run`` of one stage.

The image tag is ``<ecr_repository>:<recipe>-<hash12>``, the hash covering the recipe's Dockerfile,
the install scripts it copies and the build arguments (base image included), so a changed recipe
or pin builds a new image and an unchanged one is pulled. Without an ECR repository (local runs)
the image is built under ``wheelfoundry-builder`` and kept in the local Docker cache.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wfbuild.execute import BuildLog, Runner
from wfbuild.images.pins import bump_module
from wfbuild.safety import check_env

LOCAL_REPOSITORY = "wheelfoundry-builder"
SESSION_DIR = "/run/wf/aws"  # where a stage container finds the job session's credentials file
# A local run's cache of build environments (wfbuild.envs), the same on every run of the machine: read-only to
# every stage, writable only to a stage that makes an environment of torch and the cell's tools
# (Stage.shared_env). An instance of the farm starts empty and has none.
CACHE_DIR = "/cache"


def image_scripts(images: Path) -> list[Path]:
    """The files of ``images/scripts`` an image is made from, without Python's bytecode caches: importing
    install_cuda.py writes ``__pycache__`` there on a machine that keeps them, and a tag that changed with
    it rebuilt the image for nothing."""
    files = (p for p in (images / "scripts").rglob("*") if p.is_file())
    return sorted(p for p in files if "__pycache__" not in p.relative_to(images).parts and p.suffix != ".pyc")


def image_hash(bundle: Path, recipe: str, base: str, build_args: Mapping[str, str]) -> str:
    images = bundle / "images"
    digest = hashlib.sha256()
    files = [images / f"{recipe}.Dockerfile", *image_scripts(images)]
    for path in files:
        digest.update(str(path.relative_to(images)).encode() + b"\0" + path.read_bytes() + b"\0")
    for key, value in sorted({"BASE_IMAGE": base, **build_args}.items()):
        digest.update(f"{key}={value}\0".encode())
    return digest.hexdigest()[:12]


def pinned_base(bundle: Path, base: str) -> str:
    """``base@sha256:...`` from the bundle's base-images.lock (docker then verifies the bytes it pulls);
    a base without a pin is refused, never built from a floating tag (docs/security.md section 5)."""
    images = bundle / "images"
    try:
        return str(bump_module(images).resolve(base, images / "base-images.lock"))
    except LookupError as exc:
        raise RuntimeError(f"refusing an unpinned base image: {exc}") from exc


def image_tag(job: Mapping[str, Any], bundle: Path) -> str:
    image = job["image"]
    repo = job.get("run", {}).get("ecr_repository") or LOCAL_REPOSITORY
    base = pinned_base(bundle, image["base"])  # a bumped pin is a new tag
    return f"{repo}:{image['recipe']}-{image_hash(bundle, image['recipe'], base, image['build_args'])}"


def build_argv(job: Mapping[str, Any], bundle: Path, tag: str) -> list[str]:
    image = job["image"]
    argv = ["docker", "build", "--pull", "-f", str(bundle / "images" / f"{image['recipe']}.Dockerfile"), "-t", tag]
    base = pinned_base(bundle, image["base"])
    for key, value in sorted({"BASE_IMAGE": base, **image["build_args"]}.items()):
        argv += ["--build-arg", f"{key}={value}"]
    return [*argv, str(bundle / "images")]


def run_argv(
    tag: str,
    name: str,
    env_file: Path,
    work: Path,
    bundle: Path,
    argv: list[str],
    endpoint: str = "",
    offline: bool = False,
    limits: Limits | None = None,
    session: Path | None = None,
    cache: tuple[Path, bool] | None = None,
) -> list[str]:
    """``docker run`` of one stage. What the build can reach is exactly: the job's work tree (the build's
    only writable mount), the bundle read-only, the variables of the env file (its job session, never this
    host's identity), the network only for a stage that needs it, and in a local run the machine's cache of
    build environments (``cache``: read-only unless the stage makes one)."""
    # Network: an offline stage (repair, smoke, manifest) gets none. Others get Docker's default
    # bridge: the container is a hop further from IMDS than the host, and the launch templates' hop
    # limit 1 keeps IMDSv2 answers from reaching it, so the build never sees the instance role. Host
    # networking only for a local emulator on loopback, which a bridged container could not reach.
    network = ["--network", "none"] if offline else (["--network", "host"] if is_loopback(endpoint) else [])
    mounts = ["-v", f"{work}:/work", "-v", f"{bundle}:/bundle:ro"]
    if session is not None:  # the job session's credentials: the runner's folder, read-only, outside /work
        mounts += ["-v", f"{session}:{SESSION_DIR}:ro"]
    if cache is not None:  # (host folder, writable): writable only for a stage that makes an environment
        mounts += ["-v", f"{cache[0]}:{CACHE_DIR}:{'rw' if cache[1] else 'ro'}"]
    if bundle.is_relative_to(work):  # the Build document unpacks the bundle inside the work tree
        mounts += ["-v", f"{bundle}:/work/{bundle.relative_to(work)}:ro"]
    limits = limits or Limits()
    return [
        "docker", "run", "--rm", "--name", name, *network,
        # No privilege the build needs: no capabilities, no setuid gains, bounded memory, CPU and processes.
        "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--memory", f"{limits.memory_mib}m", "--cpus", str(limits.cpus), "--pids-limit", str(limits.pids),
        "--env-file", str(env_file), *mounts, "-w", "/work", tag, *argv,
    ]  # fmt: skip


@dataclass(frozen=True)
class Limits:
    """What one stage's container may use: a cap that keeps a runaway build from taking the host
    (the runner, its heartbeats and its uploads) down with it, not a share between cells."""

    memory_mib: int = 4096
    cpus: int = 1
    pids: int = 16384


def is_loopback(endpoint: str) -> bool:
    host = urllib.parse.urlsplit(endpoint).hostname or ""
    return host == "localhost" or host.startswith("127.") or host == "::1"


def write_env_file(path: Path, env: Mapping[str, str]) -> Path:
    """docker --env-file takes each line literally (no quoting), so values must be single lines."""
    check_env(dict(env), "stage env")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.writelines(f"{key}={value}\n" for key, value in sorted(env.items()))
    return path


def ecr_login(registry: str, region: str | None, log: BuildLog, env: Mapping[str, str]) -> None:
    import boto3

    token = boto3.client("ecr", region_name=region).get_authorization_token()["authorizationData"][0]
    user, password = base64.b64decode(token["authorizationToken"]).decode().split(":", 1)
    proc = subprocess.run(
        ["docker", "login", "--username", user, "--password-stdin", registry],
        input=password, env=dict(env), capture_output=True, text=True,
    )  # fmt: skip
    log.note(f"docker login {registry}: {'ok' if proc.returncode == 0 else proc.stderr.strip()}")


def image_id(tag: str, env: Mapping[str, str]) -> str | None:
    """The local image's content id (sha256 of its config): what the provenance names as the builder image."""
    proc = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", tag], env=dict(env), capture_output=True
    )
    return (proc.stdout.decode().strip() or None) if proc.returncode == 0 else None


def ensure_image(
    job: Mapping[str, Any], bundle: Path, runner: Runner, work: Path, region: str | None, env: Mapping[str, str]
) -> str:
    """Pull the builder image, else build it (and push it when there is a repository)."""
    provisioned = env.get("WF_BUILDER_IMAGE", "")
    if provisioned:  # a host whose builder image was made beforehand (the Docker test bed's)
        if image_id(provisioned, env) is None:
            raise RuntimeError(f"WF_BUILDER_IMAGE={provisioned} is not an image on this host")
        runner.log.note(f"builder image {provisioned} (WF_BUILDER_IMAGE; not built from {job['image']['recipe']})")
        return provisioned
    tag = image_tag(job, bundle)
    repo = job.get("run", {}).get("ecr_repository") or ""
    if repo:
        ecr_login(repo.split("/", 1)[0], region, runner.log, env)
        if runner.run(["docker", "pull", tag], env, work) == 0:
            return tag
    elif subprocess.run(["docker", "image", "inspect", tag], env=dict(env), capture_output=True).returncode == 0:
        return tag
    runner.log.note(f"building builder image {tag}")
    if runner.run(build_argv(job, bundle, tag), env, work) != 0:
        raise RuntimeError(f"docker build of {tag} failed")
    if repo and runner.run(["docker", "push", tag], env, work) != 0:
        runner.log.note(f"push of {tag} failed; the next job builds the image again")
    return tag
