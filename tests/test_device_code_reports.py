"""Where a CUDA cell's device code is said: the manifest, the signed provenance, Collect's result and the run's
report, `status` / `local run` (wheelfoundry_user.archs, failures), the merge of a pure-Python cell wheel and
the GPU step's probe (wfbuild.gpu.gpu_probe, wfbuild.gpu.gpu_test). The records come from wfbuild.cuda.devicecode."""

from __future__ import annotations

import base64
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.buildspecs.test_device_code import FIXTURES
from wfbuild.gpu import gpu_probe, gpu_test
from wfbuild.runner import manifest
from wheelfoundry.aws.report import report
from wheelfoundry.aws.results import device_code_summary
from wheelfoundry.publishing import provenance
from wheelfoundry.publishing.merge import Build, MergeConflict, merge
from wheelfoundry_user import archs
from wheelfoundry_user.failures import cause_lines

CELL = "torch2.14.1-cp311-cuda13.0-x86_64"
OK = {
    "cell": CELL,
    "cuda": "13.0",
    "arch_list": "9.0",
    "status": "ok",
    "problem": "",
    "sass": ["sm_90"],
    "ptx": [],
    "missing": [],
    "serves": {"9.0": ["sm_90"]},
    "files": {"wf_x/_C.so": {"sass": ["sm_90"], "ptx": [], "ptx_isa": [], "entries": 1}},
}
REFUSED = {
    **OK,
    "cell": "torch2.13.0-cp311-cuda13.0-x86_64",
    "status": "refused",
    "problem": "no compiled file holds device code: the build compiled host code only",
    "sass": [],
    "missing": ["9.0"],
    "serves": {"9.0": []},
    "files": {"wf_x/_C.so": {"sass": [], "ptx": [], "ptx_isa": [], "entries": 0}},
}


def _work(tmp_path: Path) -> Path:
    """A CUDA extension job's work folder after its cells ran: one cell published, one refused."""
    work = tmp_path / "work"
    job = {
        "id": "wf-x-cuda13.0-x86_64",
        "kind": "extension",
        "cuda": "13.0",
        "variant": "cu130",
        "platform": "x86_64",
        "env": {},
        "packages": [{"name": "wf-x", "env": {}}],
        "extension": {
            "cells": [
                {"id": CELL, "build_id": "torch2.14-cu130", "torch_version": "2.14.1", "python": "3.11"},
                {"id": REFUSED["cell"], "build_id": "torch2.13-cu130", "torch_version": "2.13.0", "python": "3.11"},
            ]
        },
    }
    (work / "meta" / "devicecode").mkdir(parents=True)
    (work / "meta" / "job.json").write_text(json.dumps(job))
    for record in (OK, REFUSED):
        (work / "meta" / "devicecode" / f"{record['cell']}.json").write_text(json.dumps(record))
    wheels = work / "dist" / "wheels" / "wf-x" / "cp311" / "torch2.14.1"
    wheels.mkdir(parents=True)
    wheel = wheels / "wf_x-0.1.0+pt214cu130-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("wf_x-0.1.0+pt214cu130.dist-info/METADATA", "Metadata-Version: 2.1\nName: wf-x\nVersion: 0.1.0\n")
        zf.writestr("wf_x-0.1.0+pt214cu130.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n")
    wheel.with_name(wheel.name + ".smoke.json").write_text('{"passed": true}')
    return work


def test_the_manifest_carries_each_cells_record_and_each_wheel_its_cells(tmp_path: Path) -> None:
    data = manifest.build_manifest(_work(tmp_path))
    assert set(data["device_code"]) == {CELL, REFUSED["cell"]}
    assert data["device_code"][REFUSED["cell"]]["status"] == "refused"
    (wheel,) = data["wheels"]
    assert wheel["cell"]["id"] == CELL
    assert wheel["device_code"]["files"]["wf_x/_C.so"]["sass"] == ["sm_90"]
    assert wheel["device_code"]["serves"] == {"9.0": ["sm_90"]}
    assert data["missing_cells"] == [REFUSED["cell"]]  # the refused cell published nothing


def test_the_signed_statement_carries_the_device_code_of_the_wheels_jobs(tmp_path: Path) -> None:
    data = manifest.build_manifest(_work(tmp_path))
    builder = {"stack": "wf", "state_machine": "arn:aws:states:us-east-1:1:stateMachine:wf"}
    subject = {"filename": "wf_x.whl", "sha256": "ab" * 32}
    stmt = provenance.statement(subject, {}, {"runs/r/jobs/j/manifest.json": data}, builder, {"id": "r"})
    byproducts = {
        b["name"]: json.loads(base64.b64decode(b["content"])) for b in stmt["predicate"]["runDetails"]["byproducts"]
    }
    held = byproducts["device_code"]["wf-x-cuda13.0-x86_64"]
    assert held[CELL] == {
        "arch_list": "9.0",
        "status": "ok",
        "files": {"wf_x/_C.so": {"sass": ["sm_90"], "ptx": [], "ptx_isa": []}},
    }
    cpu = provenance.statement(subject, {}, {"k": {"job_id": "cpu"}}, builder, {"id": "r"})
    assert [b["name"] for b in cpu["predicate"]["runDetails"]["byproducts"]] == ["toolchain", "reproducibility"]


def test_collect_and_the_report_pass_on_each_cells_architectures() -> None:
    data = {"device_code": {CELL: OK, REFUSED["cell"]: REFUSED}}
    summary = device_code_summary(data, {CELL, REFUSED["cell"]})
    assert summary[CELL] == {"status": "ok", "arch_list": "9.0", "sass": ["sm_90"], "ptx": [], "missing": []}
    assert summary[REFUSED["cell"]]["missing"] == ["9.0"]
    assert device_code_summary({"device_code": {}}, {CELL}) == {} and device_code_summary({}, {CELL}) == {}
    # the manifest is the build's: a cell the job contract does not name, or a giant record, stays out of the state
    planted = {"device_code": {"other": OK, CELL: {**OK, "sass": ["sm_90" * 100] * 1000}}}
    (only,) = device_code_summary(planted, {CELL}).values()
    assert len(only["sass"]) == 32 and all(len(n) == 40 for n in only["sass"])

    class S3:
        def put_object(self, **kw: Any) -> None:
            self.body = json.loads(kw["Body"])

    s3 = S3()
    run = {"id": "r", "channel": "c", "bucket": "b"}
    result = {"job_id": "j", "status": "partial", "device_code": summary}
    with pytest.raises(Exception, match="1 job"):  # a partial job is reported; the cells' record still is
        report({"run": run, "build_results": [result]}, s3)
    assert s3.body["device_code"][CELL]["sass"] == ["sm_90"]


def test_status_and_local_run_show_per_cell_architectures_or_the_refusal() -> None:
    lines = archs.lines({"j": {"device_code": {CELL: OK, REFUSED["cell"]: REFUSED}}, "cpu": None})
    assert lines[0].startswith("device code (per CUDA cell")
    assert f"  {CELL}: SASS sm_90 (arch list 9.0: covered)" in lines
    refused = f"  {REFUSED['cell']}: no device code (arch list 9.0): REFUSED, no compiled file holds device code"
    assert any(line.startswith(refused) for line in lines)
    assert archs.lines({"cpu": {"device_code": None}}) == []


def test_a_refusal_is_the_cause_a_failed_run_shows() -> None:
    tail = (
        "[wfbuild 10:00:01] stage devicecode-x: python3 -m wfbuild.cuda.devicecode\n"
        "[x] device code: _C.so: host code only (no .nv_fatbin)\n"
        "[x] DeviceCodeMissing:\n"
        "[x] DEVICE CODE REFUSED: cell x (CUDA 13.0, arch list 9.0): no compiled file holds device code\n"
        "[x] DEVICE CODE REFUSED: examined 1 compiled file(s): _C.so: host code only (no .nv_fatbin)\n"
        "[x] DEVICE CODE REFUSED: usual cause: ... set it in the request's build_env\n"
        "[wfbuild 10:00:02] stage devicecode-x: failed in 0.3s\n"
        "[y] warning: another cell's compiler says error-prone things later\n"  # a cell beside it, still building
        "[y] note: cannot inline this, failed attempt\n"
        "manifest: /work/manifest.json (failed, 0 wheel(s))\n"
    )
    lines = cause_lines(tail)
    assert len(lines) == 3 and all(line.startswith("DEVICE CODE REFUSED: ") for line in lines)
    assert "no compiled file holds device code" in lines[0]


def _pure_wheel(folder: Path) -> Path:
    folder.mkdir(parents=True)
    path = folder / "tla-0.1.0+pt214cu130-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("tla/__init__.py", "")
        zf.writestr("tla-0.1.0+pt214cu130.dist-info/WHEEL", "Wheel-Version: 1.0\nTag: py3-none-any\n")
    return path


def test_merging_a_pure_python_cell_wheel_names_the_cause_not_only_the_tag(tmp_path: Path) -> None:
    wheel = _pure_wheel(tmp_path / "a")
    with pytest.raises(MergeConflict, match=r"a pure-Python wheel: its cell compiled nothing.*build_env"):
        merge([Build("torch2.14-cu130", "2.14.1", "13.0", wheel)], tmp_path / "out")


def _spec(codes: list[list[str]], arch_list: str = "9.0") -> dict[str, Any]:
    return {
        "arch_list": arch_list,
        "device_code": [{"file": f"w.whl:x/_{i}.so", "codes": c} for i, c in enumerate(codes)],
    }


def test_the_gpu_step_asserts_the_wheels_own_device_code_covers_its_gpu() -> None:
    h100 = (9, 0)
    assert gpu_probe.device_verdict(_spec([["sm_90"]]), "H100", h100) is None
    assert gpu_probe.device_verdict(_spec([[], ["sm_80", "compute_80"]]), "H100", h100) is None  # PTX JIT
    verdict, detail = gpu_probe.device_verdict(_spec([[]]), "H100", h100) or ("", "")
    assert verdict == "failed" and "no compiled file of the wheels holds device code" in detail
    # the arch list asks for 9.0 but the bytes hold sm_80 alone: a failure, never "not testable"
    verdict, detail = gpu_probe.device_verdict(_spec([["sm_80"]]), "H100", h100) or ("", "")
    assert verdict == "failed" and "asks for code H100 (sm_90) runs, the wheels hold only _0.so: sm_80" in detail
    # neither the arch list nor the bytes hold code for this GPU: not testable here
    verdict, detail = gpu_probe.device_verdict(_spec([["sm_80"]], "8.0"), "H100", h100) or ("", "")
    assert verdict == "not-testable" and "holds nothing H100 (sm_90) runs" in detail
    assert gpu_probe.device_verdict({"arch_list": "9.0"}, "H100", h100) is None  # torch's own job: no record


def test_the_gpu_steps_spec_reads_the_device_code_from_the_wheels_bytes(tmp_path: Path) -> None:
    wheel = tmp_path / "wf_x-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("wf_x/_C.so", (FIXTURES / "libmulti.so").read_bytes())
        zf.writestr("wf_x-0.1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: wf-x\nVersion: 0.1.0\n")
        zf.writestr("wf_x-0.1.0.dist-info/top_level.txt", "wf_x\n")
    spec = gpu_test.probe_spec([wheel], "9.0", None)
    assert spec["device_code"] == [
        {"file": f"{wheel.name}:wf_x/_C.so", "codes": ["compute_90", "sm_100f", "sm_80", "sm_90a"]}
    ]
    assert gpu_probe.device_verdict(spec, "H100", (9, 0)) is None
    assert gpu_probe.device_verdict(spec, "B200", (10, 0)) is None  # sm_100f runs on 10.0
    assert gpu_probe.device_verdict(spec, "A10", (8, 6)) is None  # sm_80 runs on 8.6
    assert gpu_probe.device_verdict(spec, "T4", (7, 5)) == (
        "not-testable",
        "the wheels' device code holds nothing T4 (sm_75) runs: _C.so: compute_90 sm_100f sm_80 sm_90a",
    )


def test_status_lists_each_cuda_cells_architectures_under_its_jobs() -> None:
    from wheelfoundry_user.status import render_status

    job = {"job": "wf-x-cuda13.0-x86_64", "executor": "ec2", "state": "failed", "stage": "done", "detail": ""}
    job |= {"elapsed_seconds": 60.0, "estimated_usd": 0.1, "actual_usd": 0.05, "device_code": {CELL: OK}}
    status = {"run": "r1", "status": "RUNNING", "elapsed_seconds": 90.0, "estimated_usd": 0.1, "actual_usd": 0.05}
    text = render_status(
        {**status, "jobs": [job, {**job, "job": "wf-x-cpu-x86_64", "device_code": None}], "bucket": "b"}
    )
    assert text.splitlines()[-2:] == [
        "device code (per CUDA cell, read from its compiled files):",
        f"  {CELL}: SASS sm_90 (arch list 9.0: covered)",
    ], text
