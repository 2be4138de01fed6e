"""Issue 11 item 1 and 4: the request's ``image`` section (schema, defaults, checks) and image jobs in the plan."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.errors import GuardrailExceeded, RequestInvalid
from wheelfoundry.planning.plan import Plan
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.images import IMAGE_PLATFORMS, normalize_cc
from wheelfoundry.request.model import ImageWheel, RuntimeImage
from wheelfoundry.request.request import parse_request

ROOT = Path(__file__).resolve().parents[1]
CPU_CUDA: dict[str, Any] = {
    "version": "2.5.1",
    "python": ["3.11", "3.12"],
    "targets": [{"accelerator": "cpu"}, {"accelerator": "cuda", "cuda": "12.4"}],
    "packages": ["torch", "torchvision"],
}


def with_image(image: dict[str, Any], base: dict[str, Any] = CPU_CUDA) -> dict[str, Any]:
    return {**base, "image": image}


def issues(raw: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(RequestInvalid) as info:
        parse_request(raw)
    return {issue.path: str(issue) for issue in info.value.issues}  # the message and what is allowed


def plan(raw: dict[str, Any]) -> Plan:
    return plan_request(parse_request(raw), load_catalog(), load_config())


def test_defaults_of_an_empty_image_section() -> None:
    request = parse_request(with_image({}))
    assert request.image == RuntimeImage()
    assert (request.image.uid, request.image.gid, request.image.user, request.image.tz) == (1000, 1000, "wf", "UTC")
    assert parse_request(CPU_CUDA).image is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [(8.6, "8.6"), (9, "9.0"), ("8.6", "8.6"), ("8.0;8.6", "8.0;8.6"), ("8.0 9.0+PTX", "8.0;9.0+PTX"),
     (["8.0", "8.6"], "8.0;8.6"), (None, None)],
)  # fmt: skip
def test_gpu_cc_spellings_normalize_to_an_arch_list(value: Any, expected: str | None) -> None:
    assert normalize_cc(value) == expected


def test_gpu_cc_and_arch_list_are_one_field_checked_against_the_cuda_version() -> None:
    parsed = parse_request(with_image({"gpu_cc": [8.0, 8.6][1]}))
    assert parsed.image is not None and parsed.image.gpu_cc == parsed.image.arch_list == "8.6"
    assert parse_request(with_image({"arch_list": "8.0;9.0"})).image.gpu_cc == "8.0;9.0"  # type: ignore[union-attr]
    assert "differs from gpu_cc" in issues(with_image({"gpu_cc": "8.6", "arch_list": "8.0"}))["image.arch_list"]
    # CUDA 12.4 cannot target 10.0 (Blackwell needs 12.8)
    assert "CUDA 12.4 cannot target 10.0" in issues(with_image({"gpu_cc": "10.0"}))["image.gpu_cc"]
    cpu_only = {**CPU_CUDA, "targets": [{"accelerator": "cpu"}]}
    assert "needs a CUDA variant" in issues(with_image({"gpu_cc": 8.6, "tag": "{python}"}, cpu_only))["image.gpu_cc"]
    assert "image.gpu_cc" in issues(with_image({"gpu_cc": "8.6.1"}))  # schema: not a compute capability


@pytest.mark.parametrize(
    ("image", "path", "fragment"),
    [
        ({"uid": 0}, "image.uid", "0 is out of range (allowed: 1 <= value <= 2147483647)"),
        ({"gid": -5}, "image.gid", "-5 is out of range (allowed: 1 <= value <= 2147483647)"),
        ({"uid": 2**31}, "image.uid", "2147483648 is out of range (allowed: 1 <= value <= 2147483647)"),
        ({"uid": "1000"}, "image.uid", "wrong type"),
        ({"user": "root"}, "image.user", "not root"),
        ({"user": "Bad User"}, "image.user", "lower-case user name"),
        ({"tz": "Mars/Olympus"}, "image.tz", "not an IANA time zone"),
        ({"tz": "../etc/passwd"}, "image.tz", "IANA time zone"),
        ({"tag": "{run}-{nope}"}, "image.tag", "unknown placeholder {nope}"),
        ({"tag": "{run}-{python}"}, "image.tag", "needs {variant}"),
        ({"tag": "a;rm -rf"}, "image.tag", "not a valid value"),
        ({"python": ["3.10"]}, "image.python[0]", "not built by this run"),
        ({"cuda": ["12.6"]}, "image.cuda[0]", "not a variant of this run"),
        ({"base": "cuda"}, "image.base", "no CUDA runtime base"),
        ({"wheels": ["numpy"]}, "image.wheels[0]", "not built by this run"),
        ({"wheels": ["torch", "Torch"]}, "image.wheels[1]", "listed twice"),
        ({"pip": ["numpy>=2"]}, "image.pip[0]", "exact pin"),
        ({"pip": ["torch==2.5.1"]}, "image.pip[0]", "one of the image's index wheels"),
        ({"sizes": 1}, "image.sizes", "unknown field"),
    ],
)
def test_each_mistake_names_its_field(image: dict[str, Any], path: str, fragment: str) -> None:
    found = issues(with_image(image))
    assert fragment in found.get(path, ""), found


def test_a_wheel_from_another_channel_and_extra_pins_are_fine() -> None:
    image = {"wheels": ["torch", {"package": "wf-vecops", "version": "1.0.0", "channel": "extensions"}]}
    parsed = parse_request(with_image({**image, "pip": ["numpy==2.1.3"]})).image
    assert parsed is not None and parsed.wheels == (ImageWheel("torch"), ImageWheel("wf-vecops", "1.0.0", "extensions"))
    assert parsed.pip == ("numpy==2.1.3",)


def test_plan_has_one_image_job_per_variant_and_python() -> None:
    p = plan(with_image({"gpu_cc": "8.6", "uid": 1234, "gid": 2345, "tz": "Europe/Berlin"}))
    assert [i.id for i in p.images] == [
        "image-torch2.5.1-cpu-py3.11-x86_64",
        "image-torch2.5.1-cpu-py3.12-x86_64",
        "image-torch2.5.1-cu124-py3.11-x86_64",
        "image-torch2.5.1-cu124-py3.12-x86_64",
    ]
    cpu, cuda = p.images[0], p.images[3]
    assert cpu.arch_list is None and cuda.arch_list == "8.6"
    assert (cuda.uid, cuda.gid, cuda.tz, cuda.recipe, cuda.base) == (
        1234, 2345, "Europe/Berlin", "runtime/slim", "python:3.12-slim-bookworm"
    )  # fmt: skip
    assert cuda.tag == "{run}-torch2.5.1-cu124-py3.12"
    assert [w.package for w in cuda.wheels] == ["torch", "torchvision"]
    assert cuda.executor == "codebuild" and cuda.estimate.usd > cpu.estimate.usd > 0
    assert p.usd == round(sum(j.estimate.usd for j in p.jobs) + sum(i.estimate.usd for i in p.images), 2)
    assert p.summary()["images"] == [i.id for i in p.images]


def test_plan_filters_variants_and_uses_the_cuda_base_when_asked() -> None:
    raw = {**CPU_CUDA, "version": "2.13.0", "targets": [{"accelerator": "cuda", "cuda": "13.0"}], "python": ["3.12"]}
    p = plan(with_image({"base": "cuda", "tag": "t-{torch}"}, raw))
    (image,) = p.images
    assert image.recipe == "runtime/cuda" and image.base == "nvidia/cuda:13.0.1-runtime-ubuntu24.04"
    assert image.python_image == "python:3.12-slim-bookworm"
    only_cpu = plan(with_image({"cuda": ["cpu"], "python": ["3.12"], "tag": "x"}))
    assert [i.id for i in only_cpu.images] == ["image-torch2.5.1-cpu-py3.12-x86_64"]


def test_extension_images_follow_its_cells() -> None:
    raw = {
        "framework": "extension",
        "name": "wf-tiny-ext",
        "source": {"s3": "s3://bucket/sources/tiny.tar.gz"},
        "torch": ["2.13"],
        "python": ["3.11"],
        "image": {"tag": "{run}"},
    }
    (image,) = plan(raw).images
    assert image.id == "image-torch2.13.0-cpu-py3.11-x86_64" and image.wheels == (ImageWheel("wf-tiny-ext"),)


def test_an_image_of_a_platform_the_stacks_image_project_cannot_build_is_refused_before_the_run() -> None:
    # The one image executor every stack has is RuntimeImageProject: x86_64 CodeBuild (no condition on it).
    from tests.helpers import resources

    project = resources()["RuntimeImageProject"]
    assert "Condition" not in project and project["Properties"]["Environment"]["Type"] == "LINUX_CONTAINER"
    assert "x86_64" in project["Properties"]["Environment"]["Image"] and IMAGE_PLATFORMS == ("x86_64",)
    both = {**CPU_CUDA, "targets": [{"accelerator": "cpu"}, {"accelerator": "cpu", "platform": "aarch64"}]}
    found = issues(with_image({"tag": "{run}-{platform}-py{python}"}, both))
    assert found == {"image": found["image"]} and found["image"].startswith("image: no image executor for aarch64")
    extension = {"framework": "extension", "name": "e", "source": {"s3": "s3://b/e.tar.gz"}, "torch": ["2.13"]}
    assert "image" in issues({**extension, "platforms": ["aarch64"], "image": {"tag": "{run}"}})
    assert plan(with_image({"tag": "{run}-{variant}-py{python}"})).images  # x86_64 only: planned as before


def test_guardrails_count_image_jobs() -> None:
    config = load_config().with_guardrails(5, 1000)
    with pytest.raises(GuardrailExceeded) as info:
        plan_request(parse_request(with_image({})), load_catalog(), config)
    assert "2 build jobs and 4 image jobs exceed" in str(info.value)


def test_cli_plan_prints_the_image_jobs(tmp_path: Path) -> None:
    request = tmp_path / "r.json"
    request.write_text('{"version": "2.5.1", "python": ["3.12"], "packages": ["torch"], "image": {"tz": "Asia/Tokyo"}}')
    out = subprocess.run(
        [sys.executable, "-m", "wheelfoundry_cli.main", "plan", str(request)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "IMAGE JOB" in out and "image-torch2.5.1-cpu-py3.12-x86_64" in out and "TZ=Asia/Tokyo" in out
    assert "--require-hashes" in out
    contracts = subprocess.run(
        [sys.executable, "-m", "wheelfoundry_cli.main", "plan", str(request), "--json"], capture_output=True, text=True,
        check=True,
    ).stdout  # fmt: skip
    (image,) = json.loads(contracts)["images"]
    assert image["tz"] == "Asia/Tokyo" and image["upstream_index"] == "https://download.pytorch.org/whl/cpu"
