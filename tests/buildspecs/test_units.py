"""Smaller pieces: checkout.sh on a real repository, versions, archives, wheel rewrites, the
container-mode plumbing, callback payload limits."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from tests.buildspecs.conftest import BUNDLE
from tests.buildspecs.jobs import jobs
from wfbuild import envs
from wfbuild.execute import BuildLog
from wfbuild.images import container
from wfbuild.runner import callback, source, stage_env
from wfbuild.runner.runner import Job
from wfbuild.wheels import versions, wheelfile
from wfbuild.wheels.libs import nvidia_rpaths

GIT = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-c", "protocol.file.allow=always"]
FILE_PROTOCOL = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "protocol.file.allow", "GIT_CONFIG_VALUE_0": "always"}


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A repository with a submodule and a tag, like pytorch/pytorch in miniature."""
    root = tmp_path_factory.mktemp("upstream")
    sub, main = root / "sub", root / "main"
    for repo in (sub, main):
        repo.mkdir()
        _git("init", "-q", cwd=repo)
    (sub / "third.c").write_text("int third;\n")
    _git("add", ".", cwd=sub)
    _git("commit", "-qm", "sub", cwd=sub)
    (main / "version.txt").write_text("2.6.0a0\n")
    _git("add", ".", cwd=main)
    _git("submodule", "add", "-q", f"file://{sub}", "third_party/sub", cwd=main)
    _git("commit", "-qm", "main", cwd=main)
    _git("tag", "v2.6.0", cwd=main)
    (main / "later.txt").write_text("after the tag\n")
    _git("add", ".", cwd=main)
    _git("commit", "-qm", "later", cwd=main)
    return main, _git("rev-parse", "v2.6.0^{commit}", cwd=main)


def _checkout(repo: str, ref: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **FILE_PROTOCOL, "WF_REPO": repo, "WF_REF": ref}
    env |= {"WF_DEST": str(tmp / "src"), "WF_COMMIT_FILE": str(tmp / "meta" / "commit")}
    return subprocess.run(["bash", str(BUNDLE / "stages" / "checkout.sh")], env=env, capture_output=True, text=True)


def test_checkout_tag_with_submodules(upstream: tuple[Path, str], tmp_path: Path) -> None:
    main, tagged = upstream
    proc = _checkout(f"file://{main}", "v2.6.0", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "meta" / "commit").read_text().strip() == tagged
    assert (tmp_path / "src" / "third_party" / "sub" / "third.c").exists()
    assert not (tmp_path / "src" / "later.txt").exists()


@pytest.mark.parametrize("ref", ["--upload-pack=touch /tmp/pwned", "v1;id", "a..b", "$(id)"])
def test_checkout_refuses_bad_refs(upstream: tuple[Path, str], tmp_path: Path, ref: str) -> None:
    proc = _checkout(f"file://{upstream[0]}", ref, tmp_path)
    assert proc.returncode != 0 and "refusing ref" in proc.stderr
    assert not (tmp_path / "src").exists()


@pytest.mark.parametrize("url", ["ext::sh -c id", "https://host/x y", "ssh://git@host/x", "/etc/passwd"])
def test_checkout_refuses_bad_urls(tmp_path: Path, url: str) -> None:
    proc = _checkout(url, "main", tmp_path)
    assert proc.returncode != 0 and "refusing repository URL" in proc.stderr


def test_nightly_version(tmp_path: Path) -> None:
    assert versions.nightly_version("2.6.0a0\n", "20241122", "cu124") == "2.6.0.dev20241122+cu124"
    assert versions.nightly_version("0.21.0a0", "20241122", "cpu") == "0.21.0.dev20241122+cpu"
    (tmp_path / "version.txt").write_text("2.10.0a0\n")
    out = subprocess.run(
        [sys.executable, "-m", "wfbuild.wheels.versions", "nightly", "--version-file", str(tmp_path / "version.txt"),
         "--date", "20260101", "--variant", "cpu"],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(BUNDLE)},
    )  # fmt: skip
    assert out.stdout.strip() == "2.10.0.dev20260101+cpu"
    assert Version(out.stdout.strip()) > Version("2.9.1")
    with pytest.raises(ValueError):
        versions.nightly_version("2.6.0a0", "2024-11-22", "cpu")


def test_nvidia_rpaths() -> None:
    cu12 = ["nvidia-cudnn-cu12==9.1.0.70", "nvidia-cuda-runtime-cu12==12.4.127", "nvidia-nvjitlink-cu12==12.4.127"]
    assert nvidia_rpaths(cu12, "12.4") == [
        "$ORIGIN/../../nvidia/cudnn/lib",
        "$ORIGIN/../../nvidia/cuda_runtime/lib",
        "$ORIGIN/../../nvidia/nvjitlink/lib",
    ]
    cu13 = ["nvidia-cublas==13.0.0.19", "nvidia-cuda-nvrtc==13.0.48", "nvidia-nccl-cu13==2.27.7", "triton==3.5"]
    assert nvidia_rpaths(cu13, "13.0") == ["$ORIGIN/../../nvidia/cu13/lib", "$ORIGIN/../../nvidia/nccl/lib"]


def _tar(members: dict[str, bytes], kind: bytes = tarfile.REGTYPE) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.type, info.size = kind, len(data)
            if kind == tarfile.SYMTYPE:
                info.linkname, info.size = "/etc/passwd", 0
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return buffer.getvalue()


def test_source_archives_unpack_one_level_up(tmp_path: Path) -> None:
    archive = tmp_path / "src.tar.gz"
    archive.write_bytes(_tar({"pkg-1.0/setup.py": b"# setup\n", "pkg-1.0/csrc/a.cpp": b"int a;\n"}))
    dest = source.unpack(archive, tmp_path / "out" / "pkg")
    assert (dest / "setup.py").read_text() == "# setup\n" and (dest / "csrc" / "a.cpp").exists()
    flat = tmp_path / "flat.zip"
    with zipfile.ZipFile(flat, "w") as zf:
        zf.writestr("setup.py", "# flat\n")
        zf.writestr("pkg/__init__.py", "")
    assert (source.unpack(flat, tmp_path / "out" / "flat") / "setup.py").read_text() == "# flat\n"


@pytest.mark.parametrize(
    ("members", "kind"),
    [
        ({"../escape.txt": b"x"}, tarfile.REGTYPE),
        ({"/abs.txt": b"x"}, tarfile.REGTYPE),
        ({"link": b""}, tarfile.SYMTYPE),
    ],
)
def test_source_archives_cannot_escape(tmp_path: Path, members: dict[str, bytes], kind: bytes) -> None:
    archive = tmp_path / "evil.tar.gz"
    archive.write_bytes(_tar(members, kind))
    with pytest.raises(source.UnsafeArchive):
        source.unpack(archive, tmp_path / "out" / "evil")
    assert not (tmp_path / "escape.txt").exists()


def _pure_wheel(tmp: Path, requires: list[str]) -> Path:
    root = tmp / "demo_pkg-1.0"
    (root / "demo_pkg").mkdir(parents=True)
    (root / "demo_pkg" / "__init__.py").write_text("")
    info = root / "demo_pkg-1.0.dist-info"
    info.mkdir()
    meta = "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    (info / "METADATA").write_text(meta + "\nA description body.\n")
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    (root / "demo_pkg-1.0.data" / "scripts").mkdir(parents=True)
    (root / "demo_pkg-1.0.data" / "scripts" / "demo").write_text("#!python\n")
    subprocess.run([sys.executable, "-m", "wheel", "pack", "-d", str(tmp), str(root)], check=True, capture_output=True)
    return tmp / "demo_pkg-1.0-py3-none-any.whl"


def test_relabel_and_requirements(tmp_path: Path) -> None:
    wheel = _pure_wheel(tmp_path, ["filelock"])
    assert wheelfile.missing_requirements(["filelock", "sympy>=1"], ["Filelock==3", "nvidia-nccl-cu12==2.21.5"]) == [
        "nvidia-nccl-cu12==2.21.5"
    ]
    with wheelfile.rewrite(wheel, tmp_path / "out", local_version="pt213cpu") as root:
        wheelfile.add_requirements(root, ["nvidia-nccl-cu12==2.21.5"])
    (new,) = (tmp_path / "out").glob("*.whl")
    assert new.name == "demo_pkg-1.0+pt213cpu-py3-none-any.whl"
    info = wheelfile.info(new)
    assert info.version == "1.0+pt213cpu" and info.requires_dist == ["filelock", "nvidia-nccl-cu12==2.21.5"]
    with zipfile.ZipFile(new) as zf:
        names = zf.namelist()
        assert "demo_pkg-1.0+pt213cpu.data/scripts/demo" in names
        assert "A description body." in zf.read("demo_pkg-1.0+pt213cpu.dist-info/METADATA").decode()
    # pip accepts the rewritten wheel (RECORD, names and METADATA agree).
    target = tmp_path / "installed"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(new)],
                   check=True, capture_output=True)  # fmt: skip
    assert (target / "demo_pkg-1.0+pt213cpu.dist-info").is_dir()


def test_find_python() -> None:
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert envs._version_of(envs.find_python(version, {})) == version
    found = envs.find_python(version, {f"WF_PYTHON_{version.replace('.', '_')}": sys.executable})
    assert found == sys.executable
    with pytest.raises(FileNotFoundError, match="WF_PYTHON_3_99"):
        envs.find_python("3.99", {})


def test_image_tag_follows_recipe_and_args(tmp_path: Path) -> None:
    job = jobs("torch-2.5.1")["torch2.5.1-cpu-aarch64"]
    job["run"] = {"ecr_repository": "123456789012.dkr.ecr.us-east-1.amazonaws.com/wf-builder"}
    tag = container.image_tag(job, BUNDLE)
    assert tag.startswith("123456789012.dkr.ecr.us-east-1.amazonaws.com/wf-builder:aarch64-cpu-")
    assert container.image_tag(job, BUNDLE) == tag
    acl = job["image"]["build_args"]["ACL_VERSION"]  # v24.04: what upstream built 2.5 with (catalog)
    job["image"]["build_args"]["ACL_VERSION"] = "v52.7.0"
    assert container.image_tag(job, BUNDLE) != tag
    copy = tmp_path / "bundle"
    shutil.copytree(BUNDLE / "images", copy / "images")
    job["image"]["build_args"]["ACL_VERSION"] = acl
    assert container.image_tag(job, copy) == tag
    # Python's bytecode caches are not what the image is made from (importing install_cuda.py writes them)
    (copy / "images" / "scripts" / "__pycache__").mkdir(exist_ok=True)
    (copy / "images" / "scripts" / "__pycache__" / "install_cuda.cpython-311.pyc").write_bytes(b"\x00")
    assert container.image_tag(job, copy) == tag
    (copy / "images" / "scripts" / "install_acl.sh").write_text("#!/usr/bin/env bash\n")
    assert container.image_tag(job, copy) != tag
    argv = container.build_argv(job, BUNDLE, tag)
    pinned = "BASE_IMAGE=quay.io/pypa/manylinux_2_28_aarch64@sha256:"
    assert argv[:3] == ["docker", "build", "--pull"] and any(a.startswith(pinned) for a in argv)
    # A bumped pin is a new image; a base without a pin is refused before any docker command.
    lock = copy / "images" / "base-images.lock"
    lock.write_text(lock.read_text().replace("sha256:f5f0", "sha256:0000"))
    (copy / "images" / "scripts" / "install_acl.sh").write_text((BUNDLE / "images/scripts/install_acl.sh").read_text())
    assert container.image_tag(job, copy) != tag
    # A CUDA builder is the pinned manylinux base plus the toolkit lock: changing the lock is a new image.
    cuda = jobs("torch-2.5.1")["torch2.5.1-cuda12.4-x86_64"]
    cuda_tag = container.image_tag(cuda, copy)
    assert cuda_tag.startswith("wheelfoundry-builder:x86_64-cuda-")
    cuda_lock = copy / "images" / "scripts" / "cuda" / "cuda-12.4-x86_64.toml"
    cuda_lock.write_text(cuda_lock.read_text() + "\n")
    assert container.image_tag(cuda, copy) != cuda_tag
    cuda["image"]["base"] = "nvidia/cuda:12.4.1-devel-rockylinux8"  # a base nobody pinned
    with pytest.raises(RuntimeError, match=r"refusing an unpinned base image: nvidia/cuda:12\.4\.1-devel"):
        container.image_tag(cuda, BUNDLE)


def test_container_stage_env_and_run_argv(tmp_path: Path) -> None:
    environ = {"WF_TASK_TOKEN": "secret-token", "WF_BUCKET": "b", "WF_JOB_KEY": "runs/r/jobs/j/job.json",
               "WF_WORK_DIR": str(tmp_path / "w"), "WF_BUNDLE_DIR": str(BUNDLE), "WF_CONTAINER": "docker",
               "AWS_REGION": "us-east-1"}  # fmt: skip
    job = Job(environ, clients={"s3": object(), "stepfunctions": object()})
    job.job = jobs("torch-2.5.1")["torch2.5.1-cpu-x86_64"]
    from wfbuild.stages.stages import render_stages

    stage = next(s for s in render_stages(job.job) if s.name == "build-torchvision-3.11")
    env = stage_env.for_stage(job, stage, in_container=True)
    assert env["PYTHONPATH"] == "/bundle" and env["WF_WORK_DIR"] == "/work" and env["AWS_REGION"] == "us-east-1"
    assert env["BUILD_VERSION"] == "0.20.1+cpu" and env["TORCHVISION_USE_PNG"] == "1" and env["BLAS"] == "MKL"
    assert "secret-token" not in json.dumps(env)
    env_file = container.write_env_file(tmp_path / "stage.env", env)
    assert oct(env_file.stat().st_mode & 0o777) == "0o600"
    argv = container.run_argv("img:tag", "wf-1", env_file, tmp_path / "w", BUNDLE, stage.argv)
    assert argv[-3:] == ["img:tag", "bash", "/bundle/stages/build-library.sh"]
    assert f"{BUNDLE}:/bundle:ro" in argv and "--env-file" in argv
    # On an instance: bridged (IMDS out of reach at hop limit 1), no privilege gain; host network only
    # for a loopback emulator.
    assert "--network" not in argv and argv[argv.index("--security-opt") + 1] == "no-new-privileges"
    assert argv[argv.index("--cap-drop") + 1] == "ALL" and "--memory" in argv and "--pids-limit" in argv
    local = container.run_argv("img:tag", "wf-1", env_file, tmp_path / "w", BUNDLE, stage.argv, "http://127.0.0.1:5")
    assert local[local.index("--network") + 1] == "host"
    # A stage that needs no network gets none, on an instance and locally alike.
    for endpoint in ("", "http://127.0.0.1:5"):
        offline = container.run_argv("i", "n", env_file, tmp_path / "w", BUNDLE, ["true"], endpoint, offline=True)
        assert offline[offline.index("--network") + 1] == "none"
    # The Build document unpacks the bundle inside the work tree: it is mounted read-only there too.
    work = tmp_path / "job"
    inside = container.run_argv("i", "n", env_file, work, work / "bundle", ["true"])
    assert f"{work / 'bundle'}:/work/bundle:ro" in inside and f"{work}:/work" in inside
    # The build's AWS identity is the job session's file; nothing of the host's reaches the env file.
    assert env["AWS_SHARED_CREDENTIALS_FILE"] == os.devnull and env["AWS_EC2_METADATA_DISABLED"] == "true"
    with pytest.raises(ValueError):
        container.write_env_file(tmp_path / "bad.env", {"A": "1\nB=2"})
    job.log.close()


def test_failure_cause_fits_and_keeps_the_end() -> None:
    tail = "".join(f'line {n} \u00e9"\\\n' for n in range(20_000))
    cause = callback.failure_cause("job-1", "build-torch-3.11", "runs/r/jobs/j/build.log", tail)
    assert len(cause) <= callback.CAUSE_LIMIT
    data = json.loads(cause)
    assert data["stage"] == "build-torch-3.11" and tail.endswith(data["log_tail"]) and "line 19999" in data["log_tail"]


def test_spot_watch_without_imds_ends_quietly(tmp_path: Path) -> None:
    log = BuildLog(tmp_path / "build.log")
    notices: list[str] = []
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    watcher = callback.SpotWatcher(log, notices.append, f"http://127.0.0.1:{port}", interval=0.05)
    started = time.monotonic()
    watcher.start()
    watcher.join(5)
    assert not watcher.is_alive() and time.monotonic() - started < 3 and notices == []
    log.close()
    assert (tmp_path / "build.log").read_text().count("no instance metadata service") == 1


def test_a_slim_wheel_carrying_torch_or_cuda_libraries_is_refused(tmp_path: Path) -> None:
    from wfbuild.wheels.libs import CUDA_LIBS, TORCH_LIBS
    from wfbuild.wheels.repair import slim_violations

    wheel = tmp_path / "ext-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name in ("ext/_C.cpython-311-x86_64-linux-gnu.so", "ext.libs/libgomp-a34b3233.so.1"):
            zf.writestr(name, b"")
    patterns = [*TORCH_LIBS, *CUDA_LIBS]
    assert slim_violations(wheel, patterns) == []
    with zipfile.ZipFile(wheel, "a") as zf:
        zf.writestr("ext.libs/libc10-12345678.so", b"")
        zf.writestr("ext.libs/libcudart-87654321.so.13", b"")
    assert slim_violations(wheel, patterns) == ["ext.libs/libc10-12345678.so", "ext.libs/libcudart-87654321.so.13"]
