"""Jobs: one per (version, target), with instance, environment contract, id and estimate."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.errors import RequestInvalid
from wheelfoundry.planning.jobs import Job, StackContext
from wheelfoundry.planning.plan import Plan
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request

ROOT = Path(__file__).resolve().parents[1]
THREE_TARGETS: dict[str, Any] = json.loads((ROOT / "examples/requests/torch-2.5.1-three-targets.json").read_text())


def plan(raw: dict[str, Any], **kw: Any) -> Plan:
    return plan_request(parse_request(raw), load_catalog(), load_config(), **kw)


def by_id(p: Plan) -> dict[str, Job]:
    return {job.id: job for job in p.jobs}


def test_one_job_per_target_with_paired_versions() -> None:
    jobs = by_id(plan(THREE_TARGETS))
    assert list(jobs) == ["torch2.5.1-cpu-x86_64", "torch2.5.1-cuda12.4-x86_64", "torch2.5.1-cpu-aarch64"]
    for job in jobs.values():
        versions = {p.name: p.version for p in job.packages}
        assert versions == {"torch": "2.5.1", "torchvision": "0.20.1", "torchaudio": "2.5.1"}
        assert job.python == ("3.11", "3.12")
        assert next(p.name for p in job.packages) == "torch"


def test_cuda_job_compiles_on_a_cpu_instance_with_memory_for_nvcc() -> None:
    job = by_id(plan(THREE_TARGETS))["torch2.5.1-cuda12.4-x86_64"]
    assert job.instance.type == "m7i.8xlarge" and job.instance.arch == "x86_64"
    env = job.env
    assert env["USE_CUDA"] == "1" and env["TORCH_CUDA_ARCH_LIST"] == "8.0;8.6;9.0+PTX"
    assert env["MAX_JOBS"] == "31"  # (128 GiB - 4) / 4 GiB per nvcc job, below 32 cores
    assert env["CMAKE_CUDA_COMPILER_LAUNCHER"] == "sccache"
    assert "nvidia-cudnn-cu12==9.1.0.70" in job.requirements
    assert env["PYTORCH_EXTRA_INSTALL_REQUIREMENTS"].split(" | ") == list(job.requirements)
    # The toolkit comes from the CUDA 12.4 lock on the pinned manylinux base, never a CUDA base image;
    # its libraries are the wheel's own nvidia-* pins (triton is not a toolkit part).
    assert job.image.recipe == "x86_64-cuda" and job.image.base == "quay.io/pypa/manylinux_2_28_x86_64"
    args = job.image.build_args
    assert args["CUDA_VERSION"] == "12.4" and args["GCC_TOOLSET"] == "13"  # nvcc 12.4 accepts GCC <= 13
    assert args["CUDA_REQUIREMENTS"].splitlines() == [r for r in job.requirements if r.startswith("nvidia-")]
    assert job.packages[0].build_version == "2.5.1+cu124"


def test_aarch64_job_uses_openblas_acl_and_64k_pages() -> None:
    job = by_id(plan(THREE_TARGETS))["torch2.5.1-cpu-aarch64"]
    assert job.instance.type.startswith("c7g") and job.instance.arch == "aarch64"
    env = job.env
    assert env["BLAS"] == "OpenBLAS" and env["USE_MKLDNN"] == "1" and env["USE_MKLDNN_ACL"] == "1"
    assert env["ACL_ROOT_DIR"] == "/acl"
    assert "max-page-size=0x10000" in env["CMAKE_SHARED_LINKER_FLAGS"]
    # 2.5.1: ACL and OpenBLAS as upstream built them (catalog: pytorch/builder@release/2.5
    # aarch64_wheel_ci_build.py; the strings of the PyPI 2.5.1 aarch64 wheel's bundled libraries)
    assert job.image.build_args["OPENBLAS_VERSION"] == "v0.3.25" and job.image.build_args["ACL_VERSION"] == "v24.04"
    assert job.image.manylinux == "manylinux_2_28_aarch64"


def test_cpu_job_contract() -> None:
    job = by_id(plan(THREE_TARGETS))["torch2.5.1-cpu-x86_64"]
    assert job.env["USE_CUDA"] == "0" and job.env["USE_MPI"] == "1" and job.env["BUILD_TEST"] == "0"
    assert job.env["_GLIBCXX_USE_CXX11_ABI"] == "0"  # before 2.7 PyTorch used the old ABI
    assert job.smoke.mpi and job.smoke.mkldnn and not job.smoke.cuda_built
    assert job.wheel_ids()[0] == "torch2.5.1-cp311-cpu-x86_64"


def test_ids_are_deterministic_and_unique() -> None:
    first, second = plan(THREE_TARGETS), plan(THREE_TARGETS)
    assert [j.id for j in first.jobs] == [j.id for j in second.jobs]
    assert [j.to_dict() for j in first.jobs] == [j.to_dict() for j in second.jobs]
    assert len({j.id for j in first.jobs}) == len(first.jobs)


def test_torch_only_and_estimates() -> None:
    full = plan(THREE_TARGETS)
    alone = plan({**THREE_TARGETS, "packages": ["torch"]})
    assert all([p.name for p in j.packages] == ["torch"] for j in alone.jobs)
    assert alone.hours < full.hours and alone.usd < full.usd
    on_demand = plan({**THREE_TARGETS, "options": {"spot": False}})
    assert on_demand.usd > full.usd  # spot is priced below on-demand


def test_narrower_library_python_support_is_planned_and_said() -> None:
    p = plan({"version": "2.6.0", "python": ["3.12", "3.13"]})
    job = p.jobs[0]
    vision = next(pin for pin in job.packages if pin.name == "torchvision")
    assert vision.python == ("3.12",)
    assert any("torchvision: built for Python 3.12 only" in n for n in p.notes)


def test_nightly_versions_are_dated_on_the_host() -> None:
    p = plan({"preset": "nightly"}, today=date(2026, 11, 22))
    pin = p.jobs[0].packages[0]
    assert pin.ref == "nightly" and pin.version_scheme == "nightly" and pin.build_version is None
    assert pin.env["WF_BUILD_DATE"] == "20261122"


def test_stack_context_reaches_the_cache_settings() -> None:
    p = plan(THREE_TARGETS, context=StackContext(bucket="my-bucket", region="eu-west-1", ecr_repository="r"))
    env = p.jobs[0].env
    assert env["SCCACHE_BUCKET"] == "my-bucket" and env["SCCACHE_REGION"] == "eu-west-1"
    assert env["SCCACHE_S3_KEY_PREFIX"] == "sccache/cpu-x86_64/"


def test_extension_matrix() -> None:
    p = plan(
        {
            "framework": "extension",
            "name": "My_Ext",
            "source": {"s3": "s3://my-bucket/sources/e.tar.gz"},
            "torch": ["2.13", "2.14"],
            "cuda": ["cpu", "13.0"],
            "python": ["3.11", "3.12"],
        }
    )
    # Cells sharing a builder image (platform + CUDA toolkit) are packed: one job per toolkit.
    assert [j.id for j in p.jobs] == ["my-ext-cpu-x86_64", "my-ext-cuda13.0-x86_64"]
    cuda = p.jobs[1]
    assert cuda.extension is not None
    assert [c.id for c in cuda.extension.cells] == [
        "torch2.13.0-cp311-cuda13.0-x86_64",
        "torch2.13.0-cp312-cuda13.0-x86_64",
        "torch2.14.1-cp311-cuda13.0-x86_64",
        "torch2.14.1-cp312-cuda13.0-x86_64",
    ]
    assert {c.local_label for c in cuda.extension.cells} == {"pt213cu130", "pt214cu130"}
    assert {c.build_id for c in cuda.extension.cells} == {"torch2.13-cu130", "torch2.14-cu130"}
    assert cuda.extension.layout == "auto" and cuda.wheel_ids() == tuple(c.id for c in cuda.extension.cells)
    assert cuda.extension.torch_index_url == "https://download.pytorch.org/whl/cu130"
    assert cuda.env["TORCH_CUDA_ARCH_LIST"] == "7.5;8.0;8.6;9.0;10.0;12.0+PTX"


def test_three_torch_two_cuda_three_python_take_two_instances() -> None:
    request = {
        "framework": "extension",
        "name": "ext",
        "source": {"s3": "s3://my-bucket/sources/e.tar.gz"},
        "torch": ["2.12", "2.13", "2.14"],
        "cuda": ["12.6", "13.0"],
        "python": ["3.11", "3.12", "3.13"],
    }
    p = plan(request)
    assert len(p.jobs) == 2, [j.id for j in p.jobs]
    assert [len(j.extension.cells) for j in p.jobs if j.extension] == [9, 9]
    assert all(j.extension and j.extension.parallel_cells > 1 for j in p.jobs)
    one_cell = plan({**request, "torch": ["2.14"], "cuda": ["13.0"], "python": ["3.11"]})
    # Nine cells on one instance cost more hours than one cell, less than nine separate instances.
    assert one_cell.hours < p.jobs[1].estimate.hours < 9 * one_cell.hours


def test_per_cell_layout_without_local_versions_is_refused_when_names_collide() -> None:
    request = {
        "framework": "extension",
        "name": "ext",
        "source": {"s3": "s3://my-bucket/sources/e.tar.gz"},
        "torch": ["2.13", "2.14"],
        "layout": "per-cell",
        "local_version": False,
    }
    with pytest.raises(RequestInvalid, match="local_version"):
        plan(request)
    assert plan({**request, "torch": ["2.14"]}).jobs[0].extension.label_wheels is False  # type: ignore[union-attr]


def test_aarch64_cuda_builds_use_the_arch_list_upstream_used_on_aarch64() -> None:
    framework = plan({"version": "2.9.1", "targets": [{"platform": "aarch64", "accelerator": "cuda", "cuda": "12.6"}]})
    (job,) = framework.jobs
    assert job.image.recipe == "aarch64-cuda" and job.env["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0"
    extension = plan(
        {
            "framework": "extension",
            "name": "x",
            "source": {"s3": "s3://bucket/sources/x.tar.gz"},
            "torch": ["2.9", "2.11"],
            "cuda": ["13.0"],
            "platforms": ["x86_64", "aarch64"],
        }
    )
    lists = {j.platform: j.env["TORCH_CUDA_ARCH_LIST"] for j in extension.jobs}
    assert lists == {"x86_64": "7.5;8.0;8.6;9.0;10.0;12.0+PTX", "aarch64": "8.0;9.0;10.0;11.0;12.0+PTX"}
    with pytest.raises(RequestInvalid, match=r"CUDA 12\.4 on aarch64 is not available for torch 2\.5\.1"):
        plan({"version": "2.5.1", "targets": [{"platform": "aarch64", "accelerator": "cuda", "cuda": "12.4"}]})
