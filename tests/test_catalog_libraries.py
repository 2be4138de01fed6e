"""Domain libraries: pure or native per the catalog, and the repair and smoke stages that follow."""

from __future__ import annotations

from pathlib import Path

import pytest
from wheelfoundry_cli.catalog_verify import source_problems

from tests.buildspecs.jobs import jobs
from tests.buildspecs.test_units import _pure_wheel
from wfbuild.stages.stages import render_stages
from wfbuild.wheels import repair
from wheelfoundry.catalog.catalog import load_catalog


def test_library_facts_have_sources_and_torchdata_is_built_pure() -> None:
    catalog = load_catalog()
    assert source_problems(catalog) == []
    for name in ("torchvision", "torchaudio", "torchtext", "torchdata"):
        assert catalog.libraries[name].sources.get("native"), name
    data = catalog.libraries["torchdata"]
    assert not data.native and data.env == {"BUILD_S3": "0"}
    assert all(catalog.libraries[n].native for n in ("torchvision", "torchaudio", "torchtext"))
    assert catalog.explanation("2.5", "torchdata.BUILD_S3")


def test_plan_carries_the_library_switches() -> None:
    job = jobs("torch-2.5.1")["torch2.5.1-cuda12.4-x86_64"]
    env = {p["name"]: p["env"] for p in job["packages"]}
    assert env["torchdata"] == {"BUILD_S3": "0"}
    assert env["torchvision"]["TORCHVISION_USE_NVJPEG"] == "1" and env["torchaudio"]["USE_FFMPEG"] == "0"


def test_native_libraries_are_repaired_and_smoke_tested_against_the_jobs_torch() -> None:
    job = jobs("torch-2.5.1")["torch2.5.1-cuda12.4-x86_64"]
    stages = {s.name: s for s in render_stages(job)}
    vision_repair = stages["repair-torchvision-3.11"].argv
    assert "libtorch*.so*" in vision_repair and "libc10*.so*" in vision_repair  # torch's libraries stay torch's
    smoke = stages["smoke-torchvision-3.11"]
    assert "smoke-torch-3.11" in smoke.needs
    assert smoke.argv[smoke.argv.index("--torch-wheel-dir") + 1] == "/work/dist/wheels/torch/cp311"


def test_a_pure_wheel_is_not_sent_through_auditwheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> Path:
        raise AssertionError("auditwheel must not run on a pure-Python wheel")

    monkeypatch.setattr(repair, "_auditwheel", refuse)
    wheel = _pure_wheel(tmp_path, [])
    out = repair.repair_one(wheel, tmp_path / "out", repair.Options(plat="manylinux_2_28_x86_64"))
    assert out.name.endswith("-py3-none-any.whl") and out.parent == tmp_path / "out"


def test_cuda13_slim_rpaths_match_upstream() -> None:
    """torch 2.14.1+cu130 pins the cuda-toolkit metapackage; its libraries live in nvidia/cu13/lib.

    pytorch/pytorch@799d09f2 .ci/manywheel/build_cuda.sh (CUDA 13, slim): CUDA_RPATHS are
    nvidia/cudnn, nvidia/nvshmem, nvidia/nccl, nvidia/cusparselt and nvidia/cu13.
    """
    job = jobs("torch-2.14.1")["torch2.14.1-cuda13.0-x86_64"]
    argv = {s.name: s for s in render_stages(job)}["repair-torch-3.12"].argv
    rpaths = {argv[i + 1] for i, a in enumerate(argv) if a == "--rpath"}
    assert rpaths == {f"$ORIGIN/../../nvidia/{d}/lib" for d in ("cudnn", "nvshmem", "nccl", "cusparselt", "cu13")}
