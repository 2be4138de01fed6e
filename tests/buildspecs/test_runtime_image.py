"""Issue 11 items 2 and 3: runtime images. The hash lock from the index, install_wheels.sh in host mode
(a real venv, a real wheel, pip --require-hashes), a refused hash, the docker commands per variant
(golden), and the runtime Dockerfiles' rules (pins, skips, no downloads, no compilers)."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.buildspecs.jobs import ROOT
from wfbuild.images import runtime_image as ri
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.publishing.index import IndexFile, render_project
from wheelfoundry.request.request import parse_request

RUNTIME = ROOT / "buildspecs" / "images" / "runtime"
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


def make_wheel(
    folder: Path, name: str = "wf_img_probe", version: str = "0.1.0", tag: str = "py3-none-any", requires: str = ""
) -> Path:
    """A real (pure) wheel, written directly: building one with pip would cost seconds."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"VALUE = 42\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requires}".encode(),
        f"{dist}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n".encode(),
    }
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for path, data in files.items()
    ]
    files[f"{dist}/RECORD"] = ("\n".join([*record, f"{dist}/RECORD,,"]) + "\n").encode()
    wheel = folder / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return wheel


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


IMAGE: dict[str, Any] = {
    "recipe": "runtime/slim", "base": f"python:{PY}-slim-bookworm", "python_image": f"python:{PY}-slim-bookworm",
    "uid": 1234, "gid": 2345, "user": "wf", "tz": "Asia/Tokyo", "arch_list": None,
}  # fmt: skip


def test_lock_comes_from_the_index_page(tmp_path: Path) -> None:
    old, new = make_wheel(tmp_path, version="0.1.0"), make_wheel(tmp_path, version="0.2.0")
    other = make_wheel(tmp_path, version="0.3.0", tag="cp39-cp39-manylinux_2_28_aarch64")
    page = render_project("demo", "wf-img-probe", [IndexFile(w.name, sha(w), None, None) for w in (old, new, other)])
    files = ri.parse_index(page)
    assert len(files) == 3
    newest = ri.select(files, "wf-img-probe", "demo", None, PY, "x86_64")
    assert (newest.filename, newest.sha256) == (new.name, sha(new))  # 0.3.0 is for another Python and platform
    pinned = ri.select(files, "wf_img_probe", "demo", "0.1.0", PY, "x86_64")
    assert pinned.line == f"wf-img-probe==0.1.0 --hash=sha256:{sha(old)}"
    assert pinned.key == f"wheels/demo/wf-img-probe/{old.name}"
    with pytest.raises(ri.ImageJobFailed, match="no wheel for Python"):
        ri.select(files, "wf-img-probe", "demo", "9.9", PY, "x86_64")


def _context(tmp_path: Path, wheel: Path, index_sha: str) -> tuple[Path, list[ri.Locked]]:
    locked = [ri.Locked("wf-img-probe", "0.1.0", wheel.name, index_sha, "demo")]
    context = tmp_path / "context"
    ri.prepare_context(context, locked, lambda key, dest: dest.write_bytes(wheel.read_bytes()))
    return context, locked


def test_host_mode_installs_with_require_hashes_and_runs_the_image_tests(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path)
    context, locked = _context(tmp_path, wheel, sha(wheel))
    assert (context / "requirements.txt").read_text().splitlines()[1] == locked[0].line
    report = ri.host_image(IMAGE, context, ri.modules_of(locked, context))
    checks = report["checks"]
    assert checks["import wf_img_probe"]["ok"] and str(context / "venv") in checks["import wf_img_probe"]["detail"]
    assert checks["time zone"] == {"ok": True, "detail": "Asia/Tokyo"}
    assert checks["user"]["ok"] is None and report["failed"] == []


def test_a_wheel_that_differs_from_the_index_hash_is_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path)
    with pytest.raises(ri.ImageJobFailed, match="differs from the index's"):
        _context(tmp_path, wheel, "0" * 64)  # the download is re-hashed before anything is installed
    # and pip itself refuses it when the lock's hash is not the file's (the Dockerfile's path)
    context, _ = _context(tmp_path, wheel, sha(wheel))
    (context / "requirements.txt").write_text(f"wf-img-probe==0.1.0 --hash=sha256:{'1' * 64}\n")
    with pytest.raises(ri.ImageJobFailed, match="DO NOT MATCH THE HASHES"):
        ri.host_image(IMAGE, context, ["wf_img_probe"])


def test_an_unhashed_or_incomplete_lock_is_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path)
    context, _ = _context(tmp_path, wheel, sha(wheel))
    (context / "requirements.txt").write_text("wf-img-probe==0.1.0\n")
    with pytest.raises(ri.ImageJobFailed, match="hash"):
        ri.host_image(IMAGE, context, ["wf_img_probe"])


def test_image_tests_check_torch_and_report_each_failure() -> None:
    """The image tests themselves, with this venv's CPU torch: the matmul runs, no GPU is reported as a
    skip (a failure with --require-gpu), a wrong TZ or arch list fails and names the check."""
    tests = [sys.executable, str(RUNTIME / "image_tests.py"), "--import=torch", "--host"]
    env = {"PATH": "/usr/bin:/bin", "TZ": "UTC", "TORCH_CUDA_ARCH_LIST": "", "CUDA_VISIBLE_DEVICES": ""}
    ok = subprocess.run([*tests, "--tz=UTC"], env=env, capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    checks = json.loads(ok.stdout)["checks"]
    assert checks["torch matmul"]["ok"] and checks["torch cuda"]["detail"] == "skipped: no GPU visible"
    bad = subprocess.run(
        [*tests, "--tz=Europe/Berlin", "--arch-list=8.6", "--require-gpu"], env=env, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    assert bad.returncode == 1
    assert set(json.loads(bad.stdout)["failed"]) == {"torch cuda", "time zone", "arch list"}
    assert "IMAGE TEST FAILED: torch cuda: AssertionError: torch.cuda.is_available() is False" in bad.stderr


def test_docker_commands_per_variant_golden(tmp_path: Path) -> None:
    raw = {"version": "2.13.0", "python": ["3.12"], "packages": ["torch"],
           "targets": [{"accelerator": "cuda", "cuda": "13.0"}],
           "image": {"base": "cuda", "gpu_cc": "9.0", "uid": 1001, "tz": "Europe/Berlin"}}  # fmt: skip
    (job,) = plan_request(parse_request(raw), load_catalog(), load_config()).images
    image = job.to_dict()
    locked = [ri.Locked("torch", "2.13.0+cu130", "torch-2.13.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
                        "a" * 64, "dev")]  # fmt: skip
    args = ri.build_args(image, "run-1", locked, "sha256:" + "b" * 64)
    ref = "123.dkr.ecr.us-east-1.amazonaws.com/wf-runtime:" + image["tag"].format(run="run-1")
    build, test, push = ri.docker_commands(image, Path("/ctx"), ref, args, ["torch"], gpu=True)
    assert build == [
        "docker", "build", "--file", "/ctx/cuda.Dockerfile", "--target", "runtime", "--tag",
        "123.dkr.ecr.us-east-1.amazonaws.com/wf-runtime:run-1-torch2.13.0-cu130-py3.12",
        "--build-arg", "BASE_IMAGE=nvidia/cuda:13.0.1-runtime-ubuntu24.04@sha256:" + "b" * 64,
        "--build-arg", "PYTHON_IMAGE=python:3.12-slim-bookworm",
        "--build-arg", "TORCH_CUDA_ARCH_LIST=9.0",
        "--build-arg", "WF_BASE_DIGEST=sha256:" + "b" * 64,
        "--build-arg", "WF_GID=1000",
        "--build-arg", "WF_RUN_ID=run-1",
        "--build-arg", "WF_TZ=Europe/Berlin",
        "--build-arg", "WF_UID=1001",
        "--build-arg", "WF_USER=wf",
        "--build-arg", "WF_WHEEL_SHA256=torch-2.13.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl=" + "a" * 64,
        "/ctx",
    ]  # fmt: skip
    assert test == [
        "docker", "run", "--rm", "--gpus", "all", ref, "python", "/opt/wf/image_tests.py", "--import=torch",
        "--user=wf", "--uid=1001", "--gid=1000", "--tz=Europe/Berlin", "--arch-list=9.0", "--require-gpu",
    ]  # fmt: skip
    assert push == ["docker", "push", ref]
    assert ri.labels(args)["dev.wheelfoundry.run-id"] == "run-1"


GOLDEN_IMAGES = Path(__file__).resolve().parent / "golden_images"
IMAGE_REQUESTS: dict[str, dict[str, Any]] = {
    # CPU and CUDA 13.0 variants on the slim base, user/tz/arch list set
    "slim": {"version": "2.13.0", "python": ["3.12"], "packages": ["torch"],
             "targets": [{"accelerator": "cpu"}, {"accelerator": "cuda", "cuda": "13.0"}],
             "image": {"uid": 1001, "gid": 1002, "user": "trainer", "tz": "Asia/Tokyo", "gpu_cc": ["9.0", "10.0"]}},
    # the CUDA runtime base (its Python copied in)
    "cuda": {"version": "2.13.0", "python": ["3.12"], "packages": ["torch"],
             "targets": [{"accelerator": "cuda", "cuda": "13.0"}], "image": {"base": "cuda", "tag": "{run}-{variant}"}},
}  # fmt: skip


def test_rendered_image_jobs_per_variant_golden() -> None:
    """`plan --dry-run` of each image job (recipe, pinned base, build, test and push commands) as golden
    files; regenerate with WF_REGENERATE_GOLDEN=1 after a deliberate change."""
    from wheelfoundry_cli.render import _dry_run_images

    rendered = {}
    for name, raw in IMAGE_REQUESTS.items():
        plan = plan_request(parse_request(raw), load_catalog(), load_config())
        rendered[GOLDEN_IMAGES / f"{name}.txt"] = "\n".join(_dry_run_images(plan)).strip() + "\n"
    if os.environ.get("WF_REGENERATE_GOLDEN") == "1":
        GOLDEN_IMAGES.mkdir(exist_ok=True)
        for path, text in rendered.items():
            path.write_text(text)
    for path, text in rendered.items():
        assert path.read_text() == text, f"{path.name} differs; WF_REGENERATE_GOLDEN=1 if intended"
    slim = rendered[GOLDEN_IMAGES / "slim.txt"]
    assert slim.count("=== image-") == 2 and "'TORCH_CUDA_ARCH_LIST=9.0;10.0'" in slim
    cuda = rendered[GOLDEN_IMAGES / "cuda.txt"]
    assert "runtime/cuda.Dockerfile (FROM nvidia/cuda:13.0.1-runtime-ubuntu24.04 (unpinned" in cuda
    # no gpu_cc: what torch 2.13.0 cu130 was built for (catalog: the PyPI wheel's -gencode list, no PTX)
    assert "'TORCH_CUDA_ARCH_LIST=7.5;8.0;8.6;9.0;10.0;12.0'" in cuda


def _bump() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bump_base_images", RUNTIME.parent / "bump_base_images.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_runtime_dockerfiles_are_pinned_multi_stage_and_download_nothing(tmp_path: Path) -> None:
    bump = _bump()
    assert bump.check() == []
    for dockerfile in sorted(RUNTIME.glob("*.Dockerfile")):
        text = dockerfile.read_text()
        stages = re.findall(r"^FROM \S+ AS (\S+)$", text, re.MULTILINE)
        assert stages[-1] == "runtime" and "install" in stages, dockerfile.name
        runtime = text.split("AS runtime", 1)[1]
        assert "USER ${WF_UID}:${WF_GID}" in runtime and "COPY --from=install /opt/venv /opt/venv" in runtime
        assert "org.opencontainers.image.base.digest" in runtime and "dev.wheelfoundry.wheel-sha256" in runtime
        assert not re.search(r"\b(curl|wget|pip install|gcc|g\+\+|build-essential|-dev)\b", text), dockerfile.name
        for check, reason in re.findall(r"^# checkov:skip=([A-Z_0-9]+):(.*)$", text, re.MULTILINE):
            assert check == "CKV_DOCKER_7" and len(reason) >= 30, dockerfile.name
    script = (RUNTIME / "install_wheels.sh").read_text()
    assert "set -euo pipefail" in script and "--require-hashes --no-deps" in script and "pip check" in script
    # an out-of-step runtime pin is reported
    images = tmp_path / "images"
    (images / "runtime").mkdir(parents=True)
    lock = images / "base-images.lock"
    lock.write_text((RUNTIME.parent / "base-images.lock").read_text())
    slim = (RUNTIME / "slim.Dockerfile").read_text()
    (images / "runtime" / "slim.Dockerfile").write_text(re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + "0" * 64, slim))
    assert any("slim.Dockerfile: BASE_IMAGE default" in p for p in bump.check(images, lock))


@pytest.mark.skipif(not (ROOT / ".venv/bin/hadolint").exists(), reason="hadolint comes with the dev extras")
def test_hadolint_and_shellcheck_are_clean() -> None:
    for dockerfile in sorted(RUNTIME.glob("*.Dockerfile")):
        subprocess.run([str(ROOT / ".venv/bin/hadolint"), str(dockerfile)], check=True)
    subprocess.run([str(ROOT / ".venv/bin/shellcheck"), str(RUNTIME / "install_wheels.sh")], check=True)
