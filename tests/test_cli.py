"""The `wheelfoundry plan` command: the issue's must-show cases, run as a user would."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from wheelfoundry_cli.main import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "examples/requests/torch-2.5.1-three-targets.json")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("WHEELFOUNDRY_", "PYTORCH_", "PYTHON_VERSION", "CUDA_", "IS_ARM64", "ENABLE_"))
    }
    exe = os.path.join(os.path.dirname(sys.executable), "wheelfoundry")
    return subprocess.run(
        [exe, *args], capture_output=True, text=True, env={**clean, **(env or {})}, check=False, cwd=ROOT
    )


def test_plan_example_prints_one_job_per_target() -> None:
    result = run("plan", EXAMPLE)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for job in ("torch2.5.1-cpu-x86_64", "torch2.5.1-cuda12.4-x86_64", "torch2.5.1-cpu-aarch64"):
        assert sum(line.startswith(job) for line in lines) == 1
    assert result.stdout.count("torchvision 0.20.1") == 3 and result.stdout.count("torchaudio 2.5.1") == 3
    assert "3 job(s)" in result.stdout


CUDA_MATRIX = ("extension-cuda-12.4.json", "extension-cuda-matrix.json")


@pytest.mark.parametrize(
    "request_file", [EXAMPLE, "nightly", *(str(ROOT / "examples/requests" / f) for f in CUDA_MATRIX)]
)
def test_the_readme_example_nightly_and_every_catalog_cuda_version_plan_without_a_refusal(request_file: str) -> None:
    result = run("plan", request_file)
    assert result.returncode == 0, result.stderr
    assert "would refuse" not in result.stdout, result.stdout


def test_the_cuda_matrix_examples_cover_every_catalog_cuda_version() -> None:
    from wheelfoundry.catalog.catalog import load_catalog

    asked = set()
    for name in CUDA_MATRIX:
        asked |= set(json.loads((ROOT / "examples/requests" / name).read_text())["cuda"]) - {"cpu"}
    assert asked == {"12.4", "12.6", "12.8", "13.0"}
    offered = {c for r in load_catalog().releases if r.torch in ("2.5", "2.9", "2.11") for c in r.cuda}
    assert asked <= offered


def test_plan_notes_the_images_a_stack_from_this_checkout_would_refuse(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import wheelfoundry_cli.main as cli_main

    pins = cli_main.checkout_pins()
    assert pins is not None and "12.4-x86_64" in pins["cuda"]  # type: ignore[operator]
    without = {**pins, "cuda": {k: v for k, v in pins["cuda"].items() if k != "12.4-x86_64"}}  # type: ignore[union-attr]
    monkeypatch.setattr(cli_main, "checkout_pins", lambda cuda=None: without)
    assert main(["plan", EXAMPLE]) == 0
    note = capsys.readouterr().out.split("note: a stack deployed from this checkout would refuse", 1)[1]
    assert note.startswith(" 1 image(s)") and "job torch2.5.1-cuda12.4-x86_64" in note
    assert "no CUDA 12.4 toolkit lock for x86_64" in note and "tools/lock_cuda.py wheels 12.4" in note
    assert "would refuse" not in run("plan", EXAMPLE, "--torch-only", "--json").stdout  # JSON stays the contract


def test_torch_only_lists_torch_alone() -> None:
    result = run("plan", EXAMPLE, "--torch-only")
    assert result.returncode == 0
    assert "torchvision" not in result.stdout and "torchaudio" not in result.stdout
    assert result.stdout.count("torch 2.5.1") == 3


def test_three_mistakes_exit_2_naming_each_field() -> None:
    result = run("plan", str(ROOT / "examples/requests/three-mistakes.json"))
    assert result.returncode == 2
    assert "3 problems" in result.stderr
    for field in ("pyhton", "python[0]", "targets[0].cuda"):
        assert f"  - {field}:" in result.stderr


def test_builder_variables_without_a_request_file() -> None:
    result = run("plan", env={"PYTORCH_VERSION": "1.13.1", "PYTHON_VERSION": "3.10"})
    assert result.returncode == 0, result.stderr
    assert "torch1.13.1-cpu-x86_64" in result.stdout and "torchvision 0.14.1" in result.stdout
    assert "3.10" in result.stdout


def test_builder_flags_build_one_target(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "plan",
            "--pytorch-version",
            "2.5.1",
            "--python-version",
            "3.11,3.12",
            "--enable-cuda",
            "--cuda-version",
            "12.4",
            "--keep-on-failure",
            "--json",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    (job,) = data["jobs"]
    assert job["id"] == "torch2.5.1-cuda12.4-x86_64" and job["options"]["keep_on_failure"] is True


def test_arm64_flag_and_python_image_style_version(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IS_ARM64", "1")
    monkeypatch.setenv("PYTHON_VERSION", "3.11.7")  # as python:3.11 images export it
    assert main(["plan", "--pytorch-version", "2.5.1", "--json"]) == 0
    (job,) = json.loads(capsys.readouterr().out)["jobs"]
    assert job["id"] == "torch2.5.1-cpu-aarch64" and job["python"] == ["3.11"]


def test_bad_boolean_variable_and_missing_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_ONLY", "maybe")
    assert main(["plan"]) == 2
    monkeypatch.delenv("TORCH_ONLY")
    assert main(["plan", "no-such-file.json"]) == 2


def test_preset_by_name() -> None:
    result = run("plan", "nightly")
    assert result.returncode == 0
    assert "torchnightly-cuda12.6-x86_64" in result.stdout


def test_dry_run_shows_image_environment_and_stages_per_job() -> None:
    result = run("plan", EXAMPLE, "--dry-run")
    assert result.returncode == 0, result.stderr
    jobs = result.stdout.split("\n=== ")[1:]
    assert [j.splitlines()[0] for j in jobs] == [
        "torch2.5.1-cpu-x86_64",
        "torch2.5.1-cuda12.4-x86_64",
        "torch2.5.1-cpu-aarch64",
    ]
    cpu, cuda, arm = jobs
    for job in jobs:
        assert "\nimage: " in job and "\nenvironment:\n" in job and "\nstages:\n" in job
        stages = re.findall(r"^\s*\d+\. \[([^\]]+)\]", job, flags=re.MULTILINE)
        assert stages[0] == "checkout-torch" and stages[-1] == "manifest"
        assert (
            stages.index("build-torch-3.11") < stages.index("build-torch-3.12") < stages.index("build-torchvision-3.11")
        )
    assert "TORCH_CUDA_ARCH_LIST='8.0;8.6;9.0+PTX'" in cuda and "FROM quay.io/pypa/manylinux_2_28_x86_64" in cuda
    assert "CUDA toolkit: buildspecs/images/scripts/cuda/cuda-12.4-x86_64.toml" in cuda
    assert "build-arg CUDA_VERSION=12.4" in cuda and "    nvidia-cublas-cu12==12.4.5.8" in cuda
    assert "slim CUDA requirements" in cuda and "nvidia-cudnn-cu12==9.1.0.70" in cuda and "USE_CUDA=1" in cuda
    assert "BLAS=OpenBLAS" in arm and "USE_MKLDNN_ACL=1" in arm and "ACL_ROOT_DIR=/acl" in arm
    # ACL v24.04 and OpenBLAS v0.3.25: what upstream built 2.5 with (catalog release 2.5)
    assert "build-arg OPENBLAS_VERSION=v0.3.25" in arm and "build-arg ACL_VERSION=v24.04" in arm
    assert "USE_CUDA=0" in cpu and "BLAS=MKL" in cpu


def test_plan_shows_where_each_job_runs_and_why() -> None:
    torch = run("plan", EXAMPLE, "--explain")
    assert torch.returncode == 0, torch.stderr
    assert "RUNS ON" in torch.stdout and "on ec2;" in torch.stdout
    assert "why torch2.5.1-cuda12.4-x86_64: ec2 m7i.8xlarge spot $" in torch.stdout
    ext = run("plan", str(ROOT / "examples/requests/extension-demo.json"), "--explain")
    assert ext.returncode == 0, ext.stderr
    row = next(line for line in ext.stdout.splitlines() if line.startswith("wf-example-ops-cpu-x86_64"))
    assert "codebuild" in row.split() and "BUILD_GENERAL1_SMALL" in ext.stdout
    assert "why wf-example-ops-cpu-x86_64: codebuild BUILD_GENERAL1_SMALL $" in ext.stdout


def test_codebuild_refused_exits_2(tmp_path: Path) -> None:
    request = json.loads(Path(EXAMPLE).read_text())
    request["options"] = {"executor": "codebuild", "max_hours": 1}
    (tmp_path / "r.json").write_text(json.dumps(request))
    result = run("plan", str(tmp_path / "r.json"))
    assert result.returncode == 2
    assert "  - options.executor: 'codebuild' cannot build torch2.5.1-cuda12.4-x86_64:" in result.stderr


def test_plan_says_what_each_layout_does_when_the_merged_wheel_fails_its_test(tmp_path: Path) -> None:
    request = json.loads((ROOT / "examples/requests/extension-demo.json").read_text())
    shown = {}
    for layout in ("auto", "merged"):
        path = tmp_path / f"{layout}.json"
        path.write_text(json.dumps({**request, "layout": layout}))
        result = run("plan", str(path))
        assert result.returncode == 0, result.stderr
        shown[layout] = " ".join(result.stdout.split())
    assert "a merged wheel that fails the test of its published bytes gives way to the cell wheels" in shown["auto"]
    assert "or the merged wheel fails its test" in shown["merged"], shown["merged"]


def test_plan_of_a_stable_request_shows_it_against_per_torch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = json.loads((ROOT / "examples/requests/extension-cuda-12.4.json").read_text())
    raw = {**request, "torch": ["2.10", "2.11"], "cuda": ["cpu", "12.6", "12.8"], "python": ["3.11", "3.12"]}
    path = tmp_path / "stable.json"
    path.write_text(json.dumps({**raw, "abi": "stable"}))
    capsys.readouterr()
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    stable = next(line for line in out.splitlines() if line.startswith("abi stable: "))
    per_torch = next(line for line in out.splitlines() if line.strip().startswith("per torch: "))
    # cpu and cu12 (12.6 with 12.8) x 2 Pythons, once; per torch: 2 torch x 3 variants x 2 Pythons. Tests: all 12.
    assert stable.startswith("abi stable: 4 build cell(s) in 2 job(s), 12 test environment(s)"), stable
    assert per_torch.strip().startswith("per torch: 12 build cell(s) in 3 job(s), 12 test environment(s)"), per_torch
    path.write_text(json.dumps({**raw, "abi": "per-torch"}))
    assert main(["plan", str(path)]) == 0
    assert "abi stable:" not in capsys.readouterr().out
