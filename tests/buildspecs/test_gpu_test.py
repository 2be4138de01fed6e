"""The GPU test script (wfbuild.gpu.gpu_test, gpu_probe.py): the arch rule, the verdicts, a real run here.

This machine has no GPU, so the end-to-end run below must say ``no-device``: never ``passed``. The same
script's ``passed`` and ``not-testable`` verdicts were shown on an H100 (docs/gpu.md, "CUDA, checked on a
real GPU").
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest

from wfbuild.gpu import gpu_test
from wfbuild.gpu.gpu_probe import covers, parse_arch_list


@pytest.mark.parametrize(
    ("arch_list", "capability", "expected"),
    [
        ("9.0", (9, 0), True),
        ("8.0", (9, 0), False),  # SASS runs only within its major version
        ("8.0", (8, 6), True),  # ... on the same or a newer minor
        ("8.6", (8, 0), False),
        ("8.0+PTX", (9, 0), True),  # PTX is compiled by the driver for newer GPUs
        ("9.0+PTX", (8, 9), False),
        ("9.0a", (9, 0), True),
        ("10.0a", (10, 3), False),  # an arch-specific build runs on that arch alone
        ("7.5;8.0;8.6;9.0;10.0;12.0+PTX", (12, 1), True),
        ("7.5;8.0;8.6", (9, 0), False),
    ],
)
def test_an_arch_list_covers_a_gpu_by_nvidias_compatibility_rules(
    arch_list: str, capability: tuple[int, int], expected: bool
) -> None:
    assert covers(arch_list, capability) is expected


def test_a_malformed_arch_list_is_named() -> None:
    assert parse_arch_list("8.0; 9.0+PTX") == [(8, 0, "", False), (9, 0, "", True)]
    with pytest.raises(ValueError, match="'sm_90'"):
        parse_arch_list("sm_90")


def test_the_summary_reads_the_probes_lines_and_a_crash_inside_a_check_fails() -> None:
    lines = [
        'WF-GPU {"begin": "matmul"}',
        'WF-GPU {"check": "matmul", "ok": true, "detail": "max |diff| 0"}',
        'WF-GPU {"begin": "conv2d"}',
        "Segmentation fault",
    ]
    result = gpu_test.summary(lines)
    assert result["verdict"] == "failed" and result["failed"] == "conv2d" and len(result["checks"]) == 1
    done = gpu_test.summary([*lines[:2], 'WF-GPU {"verdict": "passed", "gpu": "NVIDIA H100", "capability": "9.0"}'])
    assert done["verdict"] == "passed" and done["gpu"] == "NVIDIA H100"
    assert gpu_test.summary([])["verdict"] == "failed"  # no verdict line is never a pass


def _wheel(folder: Path, requires: tuple[str, ...] = ()) -> Path:
    path = folder / "wf_gpu_probe_demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("wf_gpu_probe_demo/__init__.py", "VALUE = 42\n")
        info = "wf_gpu_probe_demo-1.0.dist-info"
        meta = "Metadata-Version: 2.1\nName: wf-gpu-probe-demo\nVersion: 1.0\n"
        zf.writestr(f"{info}/METADATA", meta + "".join(f"Requires-Dist: {r}\n" for r in requires))
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/top_level.txt", "wf_gpu_probe_demo\n")
        zf.writestr(f"{info}/RECORD", "")
    return path


def test_the_script_installs_the_wheels_beside_a_torch_and_reports_no_device_here(tmp_path: Path) -> None:
    # the dev venv (its CPU torch plays the GPU host's torch) is the base: no GPU here, so "no-device"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels)
    report = tmp_path / "report.json"
    argv = ["--wheel-dir", str(wheels), "--arch-list", "9.0", "--work-dir", str(tmp_path / "w")]
    code = gpu_test.main([*argv, "--report", str(report), "--base-python", sys.executable])
    result = json.loads(report.read_text())
    assert code == 0 and result["verdict"] == "no-device", result
    assert result["checks"][0] == {"check": "requirements", "ok": True, "detail": "none"}, result["checks"]
    assert "sees no CUDA device" in result["detail"] and result["wheels"] == [_wheel(tmp_path).name]
    spec = gpu_test.probe_spec(sorted(wheels.glob("*.whl")), "9.0", Path("tests"))
    assert spec["kind"] == "extension" and spec["modules"] == ["wf_gpu_probe_demo"]
    assert spec["tests"] == str(Path.cwd() / "tests")  # the probe runs in another folder


def test_a_wheel_that_does_not_install_fails_at_install(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "broken-1.0-py3-none-any.whl").write_bytes(b"not a zip")
    report = tmp_path / "report.json"
    argv = ["--wheel-dir", str(wheels), "--arch-list", "9.0", "--work-dir", str(tmp_path / "w")]
    assert gpu_test.main([*argv, "--report", str(report), "--base-python", sys.executable]) == 1
    assert json.loads(report.read_text())["failed"] == "install"


MET = ("torch>=2.0", 'wf-none-such; python_version < "3"', "packaging")


def test_the_wheels_requirements_are_read_against_the_venvs_packages(tmp_path: Path) -> None:
    import torch

    _wheel(tmp_path, (*MET, "torch>=99.0", "wf-none-such>=1"))
    unmet, found = gpu_test.requirements(Path(sys.executable), sorted(tmp_path.glob("*.whl")))
    name = _wheel(tmp_path).name
    assert unmet == [f"{name} requires torch>=99.0, the venv has torch {torch.__version__}",
                     f"{name} requires wf-none-such>=1, the venv has none"], unmet  # fmt: skip
    assert found[0] == f"torch>=2.0: torch {torch.__version__}" and len(found) == 2, found  # the marker skipped


@pytest.mark.heavy  # a venv of its own (15 s): `make test-heavy`
def test_offline_over_the_hosts_torch_a_wheel_needing_a_newer_torch_fails_at_install(tmp_path: Path) -> None:
    # --no-deps installs anything: the wheels' ranges are checked against the host's packages instead
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, (*MET, "torch>=99.0"))
    report = tmp_path / "report.json"
    argv = ["--wheel-dir", str(wheels), "--arch-list", "9.0", "--work-dir", str(tmp_path / "w")]
    assert gpu_test.main([*argv, "--report", str(report), "--base-python", sys.executable]) == 1
    result = json.loads(report.read_text())
    assert result["failed"] == "install" and "requires torch>=99.0, the venv has torch" in result["detail"], result


PASSING_PROBE = (
    "import json\n"
    'print("WF-GPU " + json.dumps({"verdict": "passed", "gpu": "Stand-in GPU", "capability": "9.0", '
    '"detail": "stand-in"}))\n'
)


@pytest.mark.heavy  # installs torch twice: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
@pytest.mark.parametrize("expected,ok", [(42, True), (41, False)])
def test_the_requests_test_command_runs_after_a_passed_probe_and_its_failure_fails_the_gpu_test(
    tmp_path: Path, expected: int, ok: bool
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels)
    project = tmp_path / "src"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_value.py").write_text(
        f"import wf_gpu_probe_demo\n\ndef test_value():\n    assert wf_gpu_probe_demo.VALUE == {expected}\n"
    )
    probe = tmp_path / "probe.py"
    probe.write_text(PASSING_PROBE)
    report = tmp_path / "report.json"
    argv = ["--wheel-dir", str(wheels), "--arch-list", "9.0", "--work-dir", str(tmp_path / "w"), "--probe", str(probe)]
    argv += ["--project", str(project), "--package", str(project), "--report", str(report)]
    argv += ["--test-arg=-m", "--test-arg=pytest", "--test-arg=-q", "--test-arg=-p", "--test-arg=no:cacheprovider"]
    argv += ["--test-arg={project}/tests", "--base-python", sys.executable]
    code = gpu_test.main(argv)
    result = json.loads(report.read_text())
    (check,) = [c for c in result["checks"] if c["check"] == "package tests"]
    if ok:
        assert code == 0 and result["verdict"] == "passed" and check["ok"] and "1 passed" in check["detail"], result
    else:
        assert code == 1 and result["verdict"] == "failed" and result["failed"] == "package tests", result
        assert "FAILED" in check["detail"] and "test_value" in result["detail"], result
