"""Validate refuses an image the bundle cannot build (an unpinned base or download) before launching.

The pins are the real bundle's (buildspecs/images), summarised by the bundle publisher's own code;
the install scripts are run against a recording fetch_verified.sh to keep the published file names
the ones the scripts really check.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import shutil
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from tests.test_planning import THREE_TARGETS, plan
from wfbuild.images import pins as bundle_pins
from wheelfoundry.aws.runs import ValidateSettings, validate
from wheelfoundry.errors import RequestInvalid
from wheelfoundry.request.pins import archive_name, unbuildable

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "buildspecs" / "images"
PINS = bundle_pins.summary(IMAGES)
EXTENSION = {
    "framework": "extension",
    "name": "x",
    "source": {"s3": "s3://bucket/sources/x.tar.gz"},
    "torch": ["2.14"],
    "cuda": ["cpu", "13.0"],
    "python": ["3.12"],
}


def test_the_summary_is_the_bundles_lock_checksums_and_toolkit_locks() -> None:
    assert "quay.io/pypa/manylinux_2_28_aarch64" in PINS["bases"] and "ComputeLibrary-24.04.tar.gz" in PINS["archives"]
    assert not [b for b in PINS["bases"] if b.startswith("pytorch/")]  # no builder base nobody can pin
    assert (
        PINS["cuda"]["13.0-x86_64"]["compiler"]
        and "nvidia-cublas==13.1.0.3" in PINS["cuda"]["13.0-x86_64"]["requirements"]
    )
    assert {"12.4-x86_64", "12.8-aarch64"} <= set(PINS["cuda"])
    assert json.loads(json.dumps(PINS)) == PINS  # it travels in bundles/current.json


def _without(key: str, value: str) -> dict[str, Any]:
    if key == "cuda":
        return {**PINS, "cuda": {k: v for k, v in PINS["cuda"].items() if k != value}}
    return {**PINS, key: [v for v in PINS[key] if v != value]}


def test_the_readme_example_is_buildable_and_each_unpinned_input_is_named() -> None:
    jobs = plan(THREE_TARGETS).jobs
    assert unbuildable(jobs, [], PINS) == []
    by_id = {job.id: job for job in jobs}
    (lock,) = unbuildable([by_id["torch2.5.1-cuda12.4-x86_64"]], [], _without("cuda", "12.4-x86_64"))
    assert (lock.path, lock.value) == ("targets", "12.4") and "12.8-x86_64" in lock.allowed
    assert "job torch2.5.1-cuda12.4-x86_64" in lock.message and "tools/lock_cuda.py wheels 12.4" in lock.message
    no_nvcc = {**PINS, "cuda": {**PINS["cuda"], "12.4-x86_64": {**PINS["cuda"]["12.4-x86_64"], "compiler": False}}}
    (compiler,) = unbuildable([by_id["torch2.5.1-cuda12.4-x86_64"]], [], no_nvcc)
    assert "has no compiler" in compiler.message and "lock_cuda.py redist 12.4" in compiler.message
    (acl,) = unbuildable([by_id["torch2.5.1-cpu-aarch64"]], [], _without("archives", "ComputeLibrary-24.04.tar.gz"))
    assert acl.value == "v24.04" and "ComputeLibrary-24.04.tar.gz (ACL_VERSION=v24.04)" in acl.message
    assert {"v22.11", "v23.05.1", "v24.09"} <= set(acl.allowed)


def test_a_library_line_the_lock_lacks_or_cannot_serve_on_the_platform_is_named() -> None:
    (job,) = [j for j in plan(THREE_TARGETS).jobs if j.cuda]
    line = "nvidia-cudnn-cu12==9.1.0.70"
    lock = PINS["cuda"]["12.4-x86_64"]
    missing = {
        **PINS,
        "cuda": {"12.4-x86_64": {**lock, "requirements": [r for r in lock["requirements"] if r != line]}},
    }
    (issue,) = unbuildable([job], [], missing)
    assert issue.value == line and "not in the CUDA 12.4 x86_64 lock" in issue.message
    unavailable = {**PINS, "cuda": {"12.4-x86_64": {**lock, "unavailable": {line: "no manylinux wheel"}}}}
    (issue,) = unbuildable([job], [], unavailable)
    assert "cannot be built: no manylinux wheel" in issue.message


def test_extension_cuda_cells_are_buildable_and_a_bundle_without_pins_is_not_checked() -> None:
    cpu, cuda = plan(EXTENSION).jobs
    assert unbuildable([cpu, cuda], [], PINS) == []
    assert cuda.image.base == "quay.io/pypa/manylinux_2_28_x86_64" and cuda.image.build_args["CUDA_VERSION"] == "13.0"
    # an extension compiles against torch's CUDA headers (cuBLAS, cuSPARSE, cuSOLVER, ...), not cuDNN or NCCL
    libraries = cuda.image.build_args["CUDA_REQUIREMENTS"].splitlines()
    assert "nvidia-cublas==13.1.0.3" in libraries and not [r for r in libraries if "cudnn" in r or "nccl" in r]
    assert unbuildable([cuda], [], None) == []  # current.json from before pin summaries: checked on the host
    assert unbuildable([cuda], [], {k: v for k, v in PINS.items() if k != "cuda"}) == []  # before toolkit locks


def test_runtime_image_bases_are_checked() -> None:
    images = plan({"version": "2.14.1", "python": ["3.12", "3.13"], "packages": ["torch"], "image": {}}).images
    issues = unbuildable([], images, PINS)
    assert [(i.path, i.value) for i in issues] == [("image", "python:3.13-slim-bookworm")]
    assert issues[0].allowed == ("python:3.12-slim-bookworm",)


class RecordingS3:
    def __init__(self, pointer: dict[str, Any]) -> None:
        self.pointer, self.puts = pointer, []  # type: list[str]

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        assert Key == "bundles/current.json"
        return {"Body": io.BytesIO(json.dumps(self.pointer).encode())}

    def put_object(self, Key: str, **_: Any) -> None:
        self.puts.append(Key)


def test_validate_refuses_before_writing_anything_unless_builds_run_without_containers() -> None:
    request = {"version": "2.14.1", "python": ["3.12"], "targets": [{"platform": "aarch64"}]}
    event = {"request": request, "name": "r1", "execution": "arn:x"}
    s3 = RecordingS3(
        {"key": "bundles/abc.zip", "sha256": "abc", "pins": _without("archives", "ComputeLibrary-52.8.0.tar.gz")}
    )
    settings = ValidateSettings("bucket", "us-east-1", "builders", 24, 250.0, 900, 10)
    with pytest.raises(RequestInvalid, match=r"targets: job torch2\.14\.1-cpu-aarch64: .*ComputeLibrary-52\.8\.0"):
        validate(event, s3, settings, date(2026, 11, 23))
    assert s3.puts == []
    hosts = ValidateSettings("bucket", "us-east-1", "builders", 24, 250.0, 900, 10, container_builds=False)
    assert validate(event, s3, hosts, date(2026, 11, 23))["jobs"] and "runs/r1/request.json" in s3.puts


def _pin_tool() -> Any:
    spec = importlib.util.spec_from_file_location("wf_pin_downloads", IMAGES / "pin_downloads.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PIN_TOOL = _pin_tool()


@pytest.mark.parametrize(
    ("arg", "value", "arch"),
    [
        ("ACL_VERSION", "v24.04", "aarch64"),
        ("OPENBLAS_VERSION", "v0.3.19", "aarch64"),
        ("OPENMPI_VERSION", "5.0.7", "x86_64"),
    ],
)
def test_published_archive_names_are_the_ones_the_install_scripts_check(arg: str, value: str, arch: str) -> None:
    # pin_downloads.learn runs the real install script against a recording fetch_verified.sh.
    url, name = PIN_TOOL.learn(arg, value, arch)
    assert url.startswith("https://") and name == archive_name(bundle_pins.ARCHIVES[arg], value, f"{arch}-cpu")
    assert name in PINS["archives"]
    assert set(PIN_TOOL.SCRIPTS) == set(bundle_pins.ARCHIVES)


def test_pin_downloads_adds_the_digest_of_the_bytes_and_the_image_becomes_buildable(tmp_path: Path) -> None:
    images = tmp_path / "images"
    shutil.copytree(IMAGES, images)
    sums = images / "scripts" / "checksums.sha256"
    asked: list[str] = []

    def fetch(url: str) -> bytes:
        asked.append(url)
        return b"acl source archive bytes"

    sums.write_text(
        "".join(ln for ln in sums.read_text().splitlines(keepends=True) if "ComputeLibrary-52.8.0" not in ln)
    )
    job = plan({"version": "2.10.0", "python": ["3.12"], "targets": [{"platform": "aarch64"}]}).jobs
    assert unbuildable(job, [], bundle_pins.summary(images))  # ACL v52.8.0 is not pinned in this copy
    added = PIN_TOOL.add(["ACL_VERSION=v52.8.0"], "aarch64", fetch, sums)
    assert asked == ["https://github.com/ARM-software/ComputeLibrary/archive/refs/tags/v52.8.0.tar.gz"]
    digest = hashlib.sha256(b"acl source archive bytes").hexdigest()
    assert added[1] == f"{digest}  ComputeLibrary-52.8.0.tar.gz" and "one source" in added[0]
    assert unbuildable(job, [], bundle_pins.summary(images)) == []
    assert PIN_TOOL.add(["ACL_VERSION=v52.8.0"], "aarch64", fetch, sums) == [] and len(asked) == 1  # already pinned
    with pytest.raises(ValueError, match="non-https"):
        PIN_TOOL.download("http://example.com/x.tar.gz")
    with pytest.raises(ValueError, match="did not reach its download"):
        PIN_TOOL.learn("ACL_VERSION", "v1; rm -rf /", "aarch64")  # the script's own pattern refuses it


def test_a_stack_lock_is_checked_before_a_launch_as_the_bundle_s_are() -> None:
    import dataclasses

    from tests.watch_support import stack_toolkit

    _, cuda = plan(EXTENSION).jobs
    lines = tuple(cuda.image.build_args["CUDA_REQUIREMENTS"].splitlines())
    without = {**PINS, "cuda": {k: v for k, v in PINS["cuda"].items() if k != "13.0-x86_64"}}
    entry = stack_toolkit("13.0")
    whole = dataclasses.replace(entry, row=dataclasses.replace(entry.row, requirements=lines))
    assert unbuildable([cuda], [], without, {cuda.id}, {"13.0-x86_64": whole}) == []
    short = dataclasses.replace(whole, row=dataclasses.replace(whole.row, requirements=lines[1:]))
    (issue,) = unbuildable([cuda], [], without, {cuda.id}, {"13.0-x86_64": short})
    assert (
        issue.value == lines[0] and f"is not in the CUDA 13.0 x86_64 lock {entry.key} (the watcher's)" in issue.message
    )
    no_nvcc = dataclasses.replace(whole, compiler=False)
    (issue,) = unbuildable([cuda], [], without, {cuda.id}, {"13.0-x86_64": no_nvcc})
    assert f"job {cuda.id}: the CUDA 13.0 x86_64 lock {entry.key} (the watcher's) has no compiler" in issue.message
