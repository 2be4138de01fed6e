"""Test a CUDA job's wheels on a GPU, as a user would meet them: a fresh venv, the matching torch, the wheels.

``python -m wfbuild.gpu.gpu_test --wheel-dir DIR --arch-list "8.0;9.0" --work-dir DIR --report FILE
[--python PY] [--torch "torch==2.11.0"] [--index-url URL ...] [--base-python PY] [--tests DIR]
[--project DIR --package DIR --test-require REQ... --test-arg ARG...]``

Without ``--base-python`` the venv is self-contained: the wheels and ``--torch`` come from the given
indexes with their dependencies, so a slim wheel gets its nvidia-* libraries from pip as a user's does.
With ``--base-python`` (the python of a venv that already holds the machine's CUDA torch) the venv sees
that venv's site-packages and the wheels are installed offline without dependencies. gpu_probe.py then runs in the
venv from a folder outside any source tree and reports a verdict (see there); the report (JSON) names
the GPU, its compute capability, each check and the log's tail. Exit 1 only for ``failed``: ``passed``,
``not-testable`` and ``no-device`` are outcomes the caller records, not errors of this program.
With ``--test-arg`` (the request's ``test.command``), a passed probe is followed by the package's own
tests (wfbuild.stages.package_tests) in the same venv with the GPU visible; their failure fails the test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from wfbuild import envs
from wfbuild.cuda import devicecode
from wfbuild.stages import package_tests
from wfbuild.wheels import wheelfile

PROBE = Path(__file__).with_name("gpu_probe.py")
SMOKE_GROUP = "wheelfoundry_smoke"
TAIL_LINES = 40
# Run by the venv's own Python, which may lack packaging: its installed distributions and PEP 508 marker values.
INSTALLED = """import importlib.metadata as m, json, os, platform as p, re, sys
have = {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(): d.version for d in m.distributions()}
env = {"implementation_name": sys.implementation.name, "implementation_version": p.python_version(),
       "os_name": os.name, "platform_machine": p.machine(), "platform_release": p.release(),
       "platform_system": p.system(), "platform_version": p.version(), "python_full_version": p.python_version(),
       "platform_python_implementation": p.python_implementation(), "sys_platform": sys.platform,
       "python_version": ".".join(p.python_version_tuple()[:2])}
print(json.dumps([have, env]))"""


def probe_spec(wheels: list[Path], arch_list: str, tests: Path | None) -> dict[str, Any]:
    """What gpu_probe.py checks; for an extension also ``device_code``: per compiled file of the wheels the
    code it holds, read from these very bytes (wfbuild.cuda.devicecode), so the verdict is the wheels' own."""
    infos = [wheelfile.info(w) for w in wheels]
    kind = "torch" if any(i.project == "torch" for i in infos) else "extension"
    modules = ["torch"] if kind == "torch" else sorted({m for w in wheels for m in wheelfile.top_level_modules(w)})
    pairs = zip(wheels, infos, strict=True)
    entry_points = [[i.project, n] for w, i in pairs for n in wheelfile.entry_points(w, SMOKE_GROUP)]
    spec: dict[str, Any] = {
        "kind": kind,
        "arch_list": arch_list,
        "modules": modules,
        "entry_points": entry_points,
        "tests": str(tests.resolve()) if tests else "",  # the probe runs elsewhere
    }
    if kind == "extension":
        read = [(f"{w.name}:{name}", entries) for w in wheels for name, entries in devicecode.read_wheel(w).items()]
        spec["device_code"] = [{"file": f, "codes": sorted({e.code.name for e in es})} for f, es in read]
    return spec


def _pip(python: Path, args: list[str], log: list[str]) -> None:
    argv = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
    proc = subprocess.run(argv, capture_output=True, text=True)
    log += (proc.stdout + proc.stderr).splitlines()
    if proc.returncode:
        raise RuntimeError(f"pip install failed ({proc.returncode}): " + " ".join(log[-3:]))


def make_venv(args: argparse.Namespace, wheels: list[Path], log: list[str]) -> tuple[Path, list[dict[str, Any]]]:
    """The venv, and the checks its making made (offline: the wheels' requirements against the host's packages)."""
    venv: Path = args.work_dir / "venv"
    if args.base_python:
        subprocess.run([args.base_python, "-m", "venv", str(venv)], check=True)
        envs.link_base(venv, Path(args.base_python).parent.parent)  # the base env's torch, through a .pth
        _pip(venv / "bin" / "python", ["--no-index", "--no-deps", *map(str, wheels)], log)
        unmet, met = requirements(venv / "bin" / "python", wheels)
        if unmet:  # --no-deps installs anything: the wheels' own ranges are checked here instead
            raise RuntimeError("the host's packages do not meet the wheels' requirements: " + "; ".join(unmet))
        return venv, [{"check": "requirements", "ok": True, "detail": "; ".join(met) or "none"}]
    subprocess.run([args.python, "-m", "venv", str(venv)], check=True)
    indexes = [f"--index-url={args.index_url[0]}"] + [f"--extra-index-url={u}" for u in args.index_url[1:]]
    _pip(venv / "bin" / "python", [*(indexes if args.index_url else []), *args.torch, *map(str, wheels)], log)
    return venv, []  # pip resolved the wheels' requirements itself


def requirements(python: Path, wheels: list[Path]) -> tuple[list[str], list[str]]:
    """(unmet, met): each wheel's Requires-Dist (markers evaluated for ``python``) against the venv's installed
    packages: "wf_x-1.0-...whl requires torch>=2.14, the venv has torch 2.11.0+cu130" (or "has none")."""
    out = subprocess.run([str(python), "-I", "-c", INSTALLED], capture_output=True, text=True, check=True).stdout
    have, environment = json.loads(out)
    unmet, met = [], []
    for wheel in wheels:
        for line in wheelfile.metadata(wheel).get_all("Requires-Dist") or []:
            req = Requirement(line)
            if req.marker and not req.marker.evaluate({**environment, "extra": ""}):
                continue
            found = have.get(canonicalize_name(req.name))
            if found is None or not req.specifier.contains(Version(found).public, prereleases=True):
                unmet.append(f"{wheel.name} requires {req}, the venv has {f'{req.name} {found}' if found else 'none'}")
            else:
                met.append(f"{req}: {req.name} {found}")
    return unmet, met


def summary(lines: list[str]) -> dict[str, Any]:
    """The probe's WF-GPU lines -> {verdict, gpu, capability, detail, checks}."""
    result: dict[str, Any] = {"verdict": "failed", "detail": "the probe ended without a verdict", "checks": []}
    begun = ""
    for line in lines:
        if not line.startswith("WF-GPU "):
            continue
        fields = json.loads(line[len("WF-GPU ") :])
        if "begin" in fields:
            begun = fields["begin"]
        elif "check" in fields:
            result["checks"].append(fields)
            begun = ""
        elif "verdict" in fields:
            result.update(fields)
            begun = ""
    if begun:  # the probe died inside a check (a crash in a kernel, say)
        result.update(failed=begun, detail=f"the probe died during check {begun!r}")
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    wheels = sorted(args.wheel_dir.glob("*.whl"))
    if not wheels:
        raise SystemExit(f"gpu_test: no wheels in {args.wheel_dir}")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    try:
        venv, made = make_venv(args, wheels, log)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        failed = {"verdict": "failed", "failed": "install", "detail": str(exc), "checks": []}
        return failed | {"log_tail": log[-TAIL_LINES:]}
    spec = probe_spec(wheels, args.arch_list, args.tests)
    scratch = args.work_dir / "run"  # outside any source tree: the installed wheel must be what imports
    scratch.mkdir(exist_ok=True)
    argv = [str(venv / "bin" / "python"), "-I", str(args.probe), json.dumps(spec)]
    proc = subprocess.run(argv, cwd=scratch, capture_output=True, text=True, timeout=args.timeout)
    lines = (proc.stdout + proc.stderr).splitlines()
    result = summary(lines)
    result["checks"][:0] = made
    if args.test_arg and result["verdict"] == "passed":  # the request's own test command, the GPU visible
        tests = package_tests.PackageTests(tuple(args.test_arg), tuple(args.test_require), args.project, args.package)
        ok, detail = package_tests.run(venv, tests, dict(os.environ))
        result["checks"].append({"check": "package tests", "ok": ok, "detail": detail})
        if not ok:
            result |= {"verdict": "failed", "failed": "package tests", "detail": f"check 'package tests': {detail}"}
    result |= {"wheels": [w.name for w in wheels], "arch_list": args.arch_list, "log_tail": lines[-TAIL_LINES:]}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel-dir", type=Path, required=True)
    parser.add_argument("--arch-list", required=True, help="the job's TORCH_CUDA_ARCH_LIST")
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--python", default=sys.executable, help="the venv's interpreter (self-contained mode)")
    parser.add_argument("--torch", action="append", default=[], help="requirement(s) installed with the wheels")
    parser.add_argument("--index-url", action="append", default=[], help="first: --index-url, then extra")
    parser.add_argument("--base-python", help="an interpreter holding the machine's CUDA torch (offline mode)")
    parser.add_argument("--tests", type=Path, help="the package's tests/ folder, run with the GPU visible")
    # The request's "test" (wfbuild.stages.package_tests), instead of the tests/ folder: as the test job's smoke runs it
    parser.add_argument("--project", type=Path, help="the source's root ({project})")
    parser.add_argument("--package", type=Path, help="the folder of its setup.py ({package})")
    parser.add_argument("--test-require", action="append", default=[], help="test.requires, one each")
    parser.add_argument("--test-arg", action="append", default=[], help="test.command, one argument each")
    parser.add_argument("--timeout", type=int, default=3600)
    parser.add_argument("--probe", type=Path, default=PROBE, help=argparse.SUPPRESS)  # the emulator's stand-in GPU
    args = parser.parse_args(argv)
    result = run(args)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    where = f" on {result['gpu']} (sm_{result['capability'].replace('.', '')})" if result.get("gpu") else ""
    print(f"gpu_test: {result['verdict']}{where}: {result.get('detail', '')}")
    for check in result["checks"]:
        print(f"  {'ok  ' if check['ok'] else 'FAIL'} {check['check']}: {check['detail']}")
    return 1 if result["verdict"] == "failed" else 0


if __name__ == "__main__":
    raise SystemExit(main())
