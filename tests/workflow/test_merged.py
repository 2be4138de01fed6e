"""Merged extension wheels through the shipped template and ASL: packed cells, one wheel, the right build.

Real builds on this host: torch 2.13.0+cpu and 2.14.1+cu130 come from the package index, and the CUDA
cell compiles with the CUDA 13.0 toolkit the runner installs from the repository's own lock
(buildspecs/images/scripts/cuda/cuda-13.0-x86_64.toml) with every system CUDA hidden: no nvcc on PATH,
no CUDA_HOME (no GPU needed to compile, or to import the CUDA build). The user
venvs see a cached build environment's torch through a .pth file (wfbuild.envs.thin_env): a fresh
venv with that torch, without copying 5 GB per test; the wheel itself comes from the emulated index.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from wheelfoundry_cli.index_server import serving

from tests.workflow.conftest import extension_request, launched_by, run, s3_json, s3_keys, upload
from wfbuild import hostinfo
from wfbuild.compiling import parallelism
from wfbuild.envs import thin_env
from wheelfoundry_local import DeployedStack, EmbeddedAws

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.heavy  # real CUDA builds: `make test-heavy` (.ci/heavy), not `make test`
CELL_LIBS = ("libtorch", "libc10", "libcudart", "libcublas", "libnvrtc", "libcuda")


def copy_example(name: str, tmp_path: Path) -> Path:
    folder = tmp_path / name
    shutil.copytree(ROOT / "examples" / name, folder, ignore=shutil.ignore_patterns("__pycache__", "build", "*.so"))
    for leftover in folder.glob("*.egg-info"):
        shutil.rmtree(leftover)
    return folder


def _torch_of(marker: Path) -> str | None:
    """The torch a cached build environment holds (wfbuild.envs' marker); other markers (smoke venvs) name none."""
    try:
        return json.loads(marker.read_text()).get("torch")
    except (ValueError, AttributeError):
        return None


def user_venv(aws: EmbeddedAws, torch: str, dest: Path) -> Path:
    """A fresh venv whose torch is ``torch`` (from a cell's cached build environment), with pytest."""
    cache = Path(os.environ.get("WF_CACHE_DIR") or aws.state_dir / "cache")  # where the agent built them
    base = next(p.parent for p in (cache / "envs").glob("*/.wf-ready") if _torch_of(p) == f"torch=={torch}")
    thin_env(dest, sys.executable, base)
    pip = [
        str(dest / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",
    ]
    subprocess.run([*pip, "pytest", "hypothesis", "numpy"], check=True)
    return dest


def pip_install(venv: Path, index: str, project: str, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [str(venv / "bin" / "python"), "-m", "pip", "install", "--isolated", "--index-url", index, *extra, project]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def run_tests(venv: Path, tests: Path) -> subprocess.CompletedProcess[str]:
    ini = venv / "pytest.ini"
    ini.write_text("[pytest]\naddopts = -p no:cacheprovider --import-mode=importlib\n")
    argv = [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-c", str(ini), "--rootdir", str(venv), str(tests)]
    return subprocess.run(argv, cwd=venv, capture_output=True, text=True, check=False)


def loaded_build(venv: Path, module: str) -> str:
    code = f"import importlib; print(importlib.import_module({module!r}).__wheelfoundry_build__)"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=False)
    return out.stdout.strip() or out.stderr.strip().splitlines()[-1]


def hide_system_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a machine without a CUDA toolkit looks like to the builds the embedded AWS starts."""
    path = [p for p in os.environ["PATH"].split(os.pathsep) if p and not (Path(p) / "nvcc").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    for name in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "CUDACXX"):
        monkeypatch.delenv(name, raising=False)
    assert shutil.which("nvcc") is None


def test_cpu_and_cuda_cells_of_two_torch_releases_merge_into_one_wheel(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_system_cuda(monkeypatch)
    uri = upload(aws, stack, copy_example("extension", tmp_path), "wf-example-ops")
    # torch==2.13.0 resolves to its CPU build (2.13.0+cpu) from this host's package index: that one cell fails
    # its --expect-cuda 13.0 check, the rest still ship (a partial run keeps what built).
    request = extension_request(uri, name="wf-example-ops", torch=["2.13", "2.14"], cuda=["cpu", "13.0"])
    result = run(aws, stack, {**request, "arch_list": "9.0"}, timeout=900)
    assert result.status == "FAILED" and result.error == "JobsFailed"
    assert "env-torch2.13.0-cp311-cuda13.0-x86_64" in (result.cause or "")
    run_id = result.arn.rsplit(":", 1)[1]
    report = s3_json(aws, stack, f"runs/{run_id}/report.json")
    assert report["missing_cells"] == ["torch2.13.0-cp311-cuda13.0-x86_64"]
    # Packing: one instance per CUDA toolkit (cpu, 13.0), not one per cell; the CPU job's cells overlap where
    # this host's cores and memory hold two at once.
    assert len(launched_by(aws, result.arn)) == 2
    # The CUDA cell compiled with the locked toolkit the runner installed (its CUDA_HOME, its nvcc first on
    # PATH), with no other nvcc on PATH and no CUDA_HOME of the machine's.
    cuda_job = s3_json(aws, stack, f"runs/{run_id}/jobs/wf-example-ops-cuda13.0-x86_64/manifest.json")
    toolkit = cuda_job["toolchain"]["cuda_toolkit"]
    assert "/toolkits/cuda13.0-x86_64-" in toolkit["cuda_home"] and toolkit["release"] == "13.0.2"
    assert "nvidia-cublas==13.1.0.3" in toolkit["wheels"] and "release 13.0" in cuda_job["toolchain"]["nvcc"]
    cpu_prefix = f"runs/{run_id}/jobs/wf-example-ops-cpu-x86_64/"
    cpu_job = s3_json(aws, stack, f"{cpu_prefix}manifest.json")
    stages = cpu_job["stages"]
    cells: dict[str, list[float]] = {}
    for stage in (s for s in stages if s.get("group")):
        assert stage["status"] == "succeeded", stage
        span = cells.setdefault(stage["group"], [stage["started_at"], stage["ended_at"]])
        span[:] = [min(span[0], stage["started_at"]), max(span[1], stage["ended_at"])]
    assert len(cells) == 2
    # Cells at once are the rule's for this host (wfbuild.compiling.parallelism.cell_slots: its cores, its memory less the
    # job's reserve, the job's memory per compiler): the runner on this host saw the same inputs. Two at once
    # overlap (both chains start together and each runs several stages); one at a time, one after the other.
    env = s3_json(aws, stack, f"{cpu_prefix}job.json")["env"]
    per_job = float(cpu_job["parallelism"]["gib_per_compiler"])
    spare = hostinfo.memory_gib() - float(env["WF_RESERVE_GIB"])
    pinned = int(os.environ.get("WF_CELL_SLOTS") or 0) or None  # the agent's runners inherit this environment
    expected = parallelism.cell_slots(hostinfo.cores(), spare, per_job, 1.0, 2, int(env["MAX_JOBS"]), 1, pinned).cells
    assert cpu_job["parallelism"]["cells_at_once"] == expected, (cpu_job["parallelism"], expected)
    first, second = sorted(cells.values())
    if expected >= 2:
        assert second[0] < first[1], f"the two cells ran one after the other: {cells}"
    else:
        assert second[0] >= first[1], f"one cell at a time, yet the cells overlapped: {cells}"

    (key,) = [k for k in s3_keys(aws, stack, "wheels/ci/wf-example-ops/") if k.endswith(".whl")]
    assert key.rsplit("/", 1)[1].startswith("wf_example_ops-0.1.0-cp311-cp311-manylinux_")
    body = aws.client("s3").get_object(Bucket=stack.outputs["WheelBucketName"], Key=key)["Body"].read()
    wheel = tmp_path / key.rsplit("/", 1)[1]
    wheel.write_bytes(body)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read("wf_example_ops-0.1.0.dist-info/METADATA").decode()
    builds_in = sorted({n.split("/")[1] for n in names if n.startswith("wf_example_ops.wfbuilds/")})
    assert builds_in == ["torch2.13-cpu", "torch2.14-cpu", "torch2.14-cu130"]
    assert "Requires-Dist: torch>=2.13,<2.15" in metadata
    assert not [n for n in names if n.rsplit("/", 1)[-1].startswith(CELL_LIBS)], "torch/CUDA library in the wheel"
    cuda_so = next(n for n in names if "/torch2.14-cu130/" in n and n.endswith(".so"))
    with zipfile.ZipFile(wheel) as zf:
        (tmp_path / "cuda.so").write_bytes(zf.read(cuda_so))
    needed = subprocess.run(["readelf", "-d", str(tmp_path / "cuda.so")], capture_output=True, text=True).stdout
    assert "libcudart" in needed and "libc10_cuda" in needed  # linked to the user's torch and CUDA, not shipped

    with serving(aws.client("s3"), stack.outputs["WheelBucketName"]) as base:
        index = f"{base}/simple/ci/"
        page = aws.client("s3").get_object(Bucket=stack.outputs["WheelBucketName"], Key="simple/ci/wf-example-ops/")
        assert "data-core-metadata=" in page["Body"].read().decode()
        for torch, expected in (("2.13.0", "torch2.13-cpu"), ("2.14.1", "torch2.14-cu130")):
            venv = user_venv(aws, torch, tmp_path / f"venv-{torch}")
            installed = pip_install(venv, index, "wf-example-ops")
            assert installed.returncode == 0, installed.stdout + installed.stderr
            assert loaded_build(venv, "wf_example_ops._C") == expected
            tests = run_tests(venv, ROOT / "examples" / "extension" / "tests")
            assert tests.returncode == 0, tests.stdout[-3000:]


def test_a_package_whose_code_imports_its_kernels_and_a_torch_it_does_not_cover(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    folder = copy_example("extension-package", tmp_path)
    uri = upload(aws, stack, folder, "wf-vecops")
    result = run(aws, stack, extension_request(uri, name="wf-vecops", torch=["2.14"]), timeout=900)
    assert result.succeeded, (result.error, result.cause)
    with serving(aws.client("s3"), stack.outputs["WheelBucketName"]) as base:
        index = f"{base}/simple/ci/"
        venv = user_venv(aws, "2.14.1", tmp_path / "venv-2.14")
        assert pip_install(venv, index, "wf-vecops").returncode == 0
        tests = run_tests(venv, folder / "tests")
        assert tests.returncode == 0, tests.stdout[-3000:]
        old = user_venv(aws, "2.13.0", tmp_path / "venv-2.13")
        refused = pip_install(old, index, "wf-vecops")
        assert refused.returncode != 0 and "torch" in refused.stdout + refused.stderr  # Requires-Dist says why
        assert pip_install(old, index, "wf-vecops", "--no-deps").returncode == 0
    out = subprocess.run([str(old / "bin" / "python"), "-c", "import wf_vecops"], capture_output=True, text=True)
    assert out.returncode == 1
    assert "wf-vecops: no build for torch 2.13.0+cpu (CUDA none) in this wheel; it has builds for: torch2.14-cpu" in (
        out.stderr
    )
