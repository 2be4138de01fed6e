"""A stable-ABI wheel's CUDA kernel on a real GPU under a torch minor other than the one it was built with (issue 66).

    .venv/bin/python bench/gpu_check_stable.py build [--out DIR]      # here: no GPU needed
    .venv/bin/python bench/gpu_check_stable.py publish [--out DIR]    # here: the farm builds, tests, publishes
    python bench/gpu_check_stable.py check WHEEL [--json FILE]        # on a host with a GPU, in its torch's venv

``build`` compiles tests/fixtures/stable_cuda_ext (a CPU op and a CUDA kernel, TORCH_TARGET_VERSION 2.10,
limited Python API; a driver API call linked with -lcuda, issue 64) in a cell's build environment the farm
made (wfbuild.envs; the heavy tests' CUDA cells leave one in the cache: torch 2.14.1, PyPI's CUDA 13.0 build,
with NVIDIA's libraries), with nvcc from the repository's CUDA 13.0 lock (wfbuild.cuda.toolkit), for sm_90.
It reads the wheel as the farm's abi stage does (wfbuild.wheels.abi: stable or per-torch, and the floor) and
what its module links (libcuda.so.1, no libcuda carried), and writes the wheel and those records into --out.
``publish`` has the farm make that wheel instead, as tests/workflow/test_stable_cuda.py does: the shipped template
on the embedded AWS, a request for stable_cuda_ext with ``abi: stable`` and ``abi_build: newest`` (torch 2.11-2.13,
CUDA 13.0, Python 3.11, sm_90): one build against torch 2.13.0, tested as published in PyPI's torch 2.11.0, 2.12.0
and 2.13.0 (find-links pointed at the empty tests/fixtures/no_wheels: a host's own CPU file of a release would
win), published once with ``Requires-Dist: torch>=2.11`` and signed; its module names libcuda.so.1, so on the
driverless build and test hosts its import uses the driver stand-in (wfbuild.wheels.driver_standin). The
published wheel and its provenance are copied out of the channel into --out.
``check`` installs nothing: it imports the wheel's package from an unpacked copy next to whatever torch the
interpreter has (torch 2.11.0+cu130 in the recorded check: inside the wheel's range, a minor other than the
2.13 it was compiled against), runs scale_add on the GPU and on the CPU
against torch's own arithmetic, calls the driver API where a GPU is, and prints and writes what ran where.
The farm's GPU step (``python -m wfbuild.gpu.gpu_test``) can test the same wheel there too; offline over the host's
torch it checks the wheel's Requires-Dist against the host's packages before anything runs.
``record`` writes bench/results/gpu_check_stable-<time>.json from publish's --out folder and the GPU host's
reports (check's --json, the GPU step's --report, and optionally a GPU step's report that had to refuse), and
prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "stable_cuda_ext"


def cuda_env(cache: Path) -> Path:
    """A cell's build environment the farm made and cached (wfbuild.envs) whose torch is a CUDA build."""
    for ready in sorted((cache / "envs").glob("*/.wf-ready")):
        env = ready.parent
        if any(env.glob("lib/python3*/site-packages/nvidia_cuda_runtime-13*")):
            return env
    raise SystemExit(f"no CUDA 13 build environment under {cache / 'envs'}: run a CUDA cell first, or name --env")


def build(out: Path, env_dir: Path | None) -> int:
    sys.path.insert(0, str(ROOT / "buildspecs"))
    from wfbuild.cuda import toolkit

    cache = Path(os.environ.get("WF_CACHE_DIR") or Path.home() / ".cache" / "wheelfoundry")
    env_dir = env_dir or cuda_env(cache)
    python = str(env_dir / "bin" / "python")
    torch = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    cuda_home = toolkit.ensure(ROOT / "buildspecs", "13.0", "x86_64", [], cache)
    env = {**toolkit.stage_env(os.environ, cuda_home), "TORCH_CUDA_ARCH_LIST": "9.0", "MAX_JOBS": "2"}
    with tempfile.TemporaryDirectory(prefix="wf-stable-") as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(FIXTURE, src)
        argv = [python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", str(out), str(src)]
        subprocess.run(argv, check=True, env=env)
        (built,) = out.glob("wf_stable_cuda-*.whl")
        # The farm's own reading of a cell (its abi stage): stable or per-torch, the floor, the deciding symbols
        reading = [sys.executable, "-m", "wfbuild.wheels.abi", "--in-dir", str(out), "--cell", "stable-sm90"]
        reading += ["--torch-version", torch.stdout.strip().split("+")[0], "--env-dir", str(env_dir)]
        reading += ["--out", str(out / "abi.json"), "--src", str(src)]
        subprocess.run(reading, check=True, env={**env, "PYTHONPATH": str(ROOT / "buildspecs")})
    needed, carried = linked(built)
    print(f"built {built.name} against torch {torch.stdout.strip()} ({env_dir}), nvcc from {cuda_home.name}, sm_90")
    print(f"  {needed['module']} needs {', '.join(needed['needed'])}; libcuda files carried: {carried or 'none'}")
    (out / "linked.json").write_text(json.dumps({**needed, "libcuda_carried": carried}, indent=1) + "\n")
    return 0 if "libcuda.so.1" in needed["needed"] and not carried else 1


def publish(out: Path) -> int:
    """The farm's own stable wheel: one run on the embedded stack, its published bytes copied into ``out``."""
    sys.path[:0] = [str(ROOT / "local"), str(ROOT / "cli"), str(ROOT / "functions"), str(ROOT)]
    from wheelfoundry_local.demo import pack_source
    from wheelfoundry_local.session import EmbeddedAws

    # every cell's torch from PyPI (a CUDA build), not a host's CPU file of the release
    os.environ["PIP_FIND_LINKS"] = str(ROOT / "tests" / "fixtures" / "no_wheels")
    with tempfile.TemporaryDirectory(prefix="wf-gpu-publish-") as state, EmbeddedAws(state_dir=Path(state)) as aws:
        stack = aws.deploy(ROOT / "template.yaml", parameters={"BuildHeartbeatSeconds": "120"})
        s3, bucket = aws.client("s3"), stack.outputs["WheelBucketName"]
        key = "sources/wf-stable-cuda-0.1.0.tar.gz"
        s3.put_object(Bucket=bucket, Key=key, Body=pack_source(FIXTURE, "wf-stable-cuda"))
        request = {"framework": "extension", "name": "wf-stable-cuda", "source": {"s3": f"s3://{bucket}/{key}"},
                   "torch": ["2.11", "2.12", "2.13"], "cuda": ["13.0"], "python": ["3.11"], "arch_list": "9.0",
                   "abi": "stable", "abi_build": "newest", "torch_index": "pip", "channel": "gpu-check",
                   "options": {"executor": "ec2"}}  # fmt: skip
        result = aws.wait_execution(aws.start_execution(stack.state_machine_arn, request), timeout=3600)
        run_id = result.arn.rsplit(":", 1)[1]
        try:
            report = json.loads(s3.get_object(Bucket=bucket, Key=f"runs/{run_id}/report.json")["Body"].read())
        except s3.exceptions.NoSuchKey:  # refused before a report (Validate): the execution's own error says why
            report = {"failed": [{"error": result.error, "cause": result.cause}]}
        listing = s3.list_objects_v2(Bucket=bucket, Prefix="wheels/gpu-check/").get("Contents", [])
        found = [o["Key"] for o in listing if o["Key"].endswith((".whl", ".provenance.json"))]
        logs = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"runs/{run_id}/jobs/").get("Contents", [])]
        for name in found + [k for k in logs if k.endswith("/build.log")]:
            local = out / (name.rsplit("/", 1)[1] if name in found else f"{name.split('/')[3]}.log")
            s3.download_file(bucket, name, str(local))
        record = {"run": run_id, "status": result.status, "published": found, "instances_left": len(aws.instances()),
                  "failed": report.get("failed"), "staged": (report.get("merge") or {}).get("wheels")}  # fmt: skip
    (out / "published.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))
    return 0 if result.status == "SUCCEEDED" and any(n.endswith(".whl") for n in found) else 1


def linked(wheel: Path) -> tuple[dict[str, Any], list[str]]:
    """The extension module's DT_NEEDED (the driver API: libcuda.so.1, the user's driver) and any libcuda file the
    wheel carries (it must carry none)."""
    import io

    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (module,) = [n for n in names if n.startswith("wf_stable_cuda/_C") and n.endswith(".so")]
        dynamic = ELFFile(io.BytesIO(archive.read(module))).get_section_by_name(".dynamic")
    assert isinstance(dynamic, DynamicSection)
    needed = [str(t.needed) for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
    return {"module": module, "needed": needed}, [n for n in names if "libcuda" in n.rsplit("/", 1)[-1]]


def check(wheel: Path, report: Path | None) -> int:
    import torch

    with tempfile.TemporaryDirectory(prefix="wf-stable-check-") as tmp:
        zipfile.ZipFile(wheel).extractall(tmp)
        sys.path.insert(0, tmp)
        import wf_stable_cuda

        a = torch.arange(1 << 20, dtype=torch.float32) / 7
        b = torch.full_like(a, 0.5)
        found: dict[str, Any] = {"wheel": wheel.name, "torch": torch.__version__, "cuda": torch.version.cuda}
        found["cpu_equal"] = bool(torch.equal(wf_stable_cuda.scale_add(a, b, 3.0), a * 3.0 + b))
        if torch.cuda.is_available():
            got = wf_stable_cuda.scale_add(a.cuda(), b.cuda(), 3.0)
            torch.cuda.synchronize()
            found |= {"gpu": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0))}
            found["gpu_on_device"] = got.device.type
            found["gpu_max_abs_error"] = float((got.cpu() - (a * 3.0 + b)).abs().max())
            try:  # cuDriverGetVersion, through -lcuda (a build with STABLE_EXT_NO_DRIVER=1 has none)
                found["driver_version"] = wf_stable_cuda.driver_version()
            except AttributeError:
                found["driver_version"] = "not built (STABLE_EXT_NO_DRIVER=1)"
    print(json.dumps(found, indent=1))
    if report:
        report.write_text(json.dumps(found, indent=1) + "\n")
    ok = found["cpu_equal"] and found.get("gpu_max_abs_error", 1.0) <= 1e-5
    return 0 if ok else 1


def record(published: Path, check_json: Path, gpu_step: Path, refused: tuple[Path, str] | None, host: str) -> int:
    """One record of the check: what the farm published (its run, the wheel's sha256, Requires-Dist, the build's
    torch, the abi reading and the torch cells it was tested in, from its provenance) and what ran on the GPU."""
    import base64
    import hashlib
    import time

    run = json.loads((published / "published.json").read_text())
    (wheel,) = published.glob("*.whl")
    statement = json.loads((published / f"{wheel.name}.provenance.json").read_text())
    predicate = json.loads(base64.b64decode(statement["payload"]))["predicate"]
    byproducts = {b["name"]: json.loads(base64.b64decode(b["content"])) for b in predicate["runDetails"]["byproducts"]}
    with zipfile.ZipFile(wheel) as archive:
        (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [ln for ln in archive.read(meta).decode().splitlines() if ln.startswith("Requires-Dist: torch")]
    built = sorted(cell for cells in byproducts["abi"].values() for cell in cells)
    checked, step = json.loads(check_json.read_text()), json.loads(gpu_step.read_text())
    tested = sorted(c for cells in byproducts["tested_in"].values() for c in cells)
    note = (f"bench/gpu_check_stable.py publish on a driverless host: the farm compiled the wheel in "
            f"{', '.join(built)}, tested it as published in {', '.join(tested)} and published it "
            f"({', '.join(requires)}); then check and the farm's GPU step (offline over the host's torch, the "
            f"wheel's Requires-Dist checked against it) on {host} with torch {checked['torch']}")  # fmt: skip
    out = {
        "note": note, "wheel": wheel.name, "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "run": run["run"], "status": run["status"], "instances_left": run["instances_left"], "requires": requires,
        "built_in": built, "abi": byproducts["abi"], "tested_in": byproducts["tested_in"], "gpu_host": host,
        "check": checked, "gpu_step": {k: v for k, v in step.items() if k != "log_tail"},
    }  # fmt: skip
    if refused:
        report, what = refused
        out["gpu_step_refused"] = {k: v for k, v in json.loads(report.read_text()).items() if k != "log_tail"}
        out["gpu_step_refused"]["wheels_were"] = what
    rows = [("wheel", wheel.name), ("sha256", out["wheel_sha256"][:16] + "..."), ("Requires-Dist", requires),
            ("compiled in", built), ("tested in (farm)", sorted(c for v in out["tested_in"].values() for c in v)),
            ("GPU host", host), ("GPU host's torch", checked["torch"]),
            ("GPU max abs error", checked.get("gpu_max_abs_error")),
            ("cuDriverGetVersion", checked.get("driver_version")), ("GPU step", step["verdict"]),
            ("refused GPU step", (out.get("gpu_step_refused") or {}).get("detail", "-"))]  # fmt: skip
    for name, value in rows:
        print(f"| {name} | {', '.join(value) if isinstance(value, list) else value} |")
    path = ROOT / "bench" / "results" / f"gpu_check_stable-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")
    ok = checked["cpu_equal"] and checked.get("gpu_max_abs_error", 1.0) <= 1e-5 and step["verdict"] == "passed"
    return 0 if ok and (refused is None or out["gpu_step_refused"]["verdict"] == "failed") else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    building = sub.add_parser("build")
    building.add_argument("--out", type=Path, default=ROOT / ".bench-wheels" / "stable")
    building.add_argument("--env", type=Path, help="a build environment with a CUDA 13 torch (default: a cached one)")
    publishing = sub.add_parser("publish")
    publishing.add_argument("--out", type=Path, default=ROOT / ".bench-wheels" / "published")
    checking = sub.add_parser("check")
    checking.add_argument("wheel", type=Path)
    checking.add_argument("--json", type=Path)
    recording = sub.add_parser("record")
    recording.add_argument("--published", type=Path, default=ROOT / ".bench-wheels" / "published")
    recording.add_argument("--check", type=Path, required=True, help="check's --json, from the GPU host")
    recording.add_argument("--gpu-step", type=Path, required=True, help="the GPU step's --report, from the GPU host")
    recording.add_argument("--refused", type=Path, help="a GPU step's report that had to refuse (optional)")
    recording.add_argument("--refused-wheels", default="", help="what that step was given, in words")
    recording.add_argument("--host", required=True, help="the GPU host, in words (GPU, driver, Python)")
    args = parser.parse_args()
    if args.command == "record":
        refused = (args.refused, args.refused_wheels) if args.refused else None
        return record(args.published, args.check, args.gpu_step, refused, args.host)
    if args.command == "build":
        args.out.mkdir(parents=True, exist_ok=True)
        return build(args.out, args.env)
    if args.command == "publish":
        args.out.mkdir(parents=True, exist_ok=True)
        return publish(args.out)
    return check(args.wheel, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
