"""Smoke-test wheels, each in a clean venv: install, import, run a small operation.

``python -m wfbuild.stages.smoke --python 3.11 [--wheel-dir DIR] [WHEEL ...] [--work-dir DIR]
[--torch-wheel-dir DIR | --base-env DIR] [--mpi] [--mkldnn] [--cuda-built] [--module MOD]``

Checks: the installed version is the wheel's; every top-level module imports *from the wheel*;
torch: a matmul, plus ``is_mpi_available()`` (--mpi), ``mkldnn.is_available()`` (--mkldnn) and, for
CUDA builds, ``torch.version.cuda`` with ``CUDA_VISIBLE_DEVICES=""`` (a CUDA wheel must import on
a machine without a GPU); torchvision: ``ops.nms``; torchaudio: ``functional.resample``; any wheel:
its ``wheelfoundry_smoke`` entry points and ``--module`` (run as ``python -m``); then, with ``--test-arg``,
the package's own tests (wfbuild.stages.package_tests).

Speed: the clean venv (``venv --without-pip``) gets only the wheel under test. What it needs
besides comes from a cached *base env* through a ``.pth`` file (see wfbuild.envs): for torch,
an env with torch's own Requires-Dist (so the wheel's dependency list is tested too, and the
wheel is installed with --no-deps); for a domain library, an env with this job's repaired torch
wheel (``--torch-wheel-dir``); for an extension, its build env (``--base-env``, torch==X). Base
envs are kept in ``$WF_CACHE_DIR`` (or ``<work-dir>/cache``) and keyed by their contents.
A failure prints ``SMOKE FAILED: <wheel>: check '<check>': <error>`` and exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from wfbuild import envs
from wfbuild.stages import package_tests
from wfbuild.wheels import driver_standin, wheelfile

PROBE = Path(__file__).with_name("smoke_probe.py")
GROUP = "wheelfoundry_smoke"
PROJECT_CHECKS = {"torchvision": ["torchvision-nms"], "torchaudio": ["torchaudio-resample"]}
MAIN_MODULE = {"torch": "torch", "torchvision": "torchvision", "torchaudio": "torchaudio"}
READY = ".wf-ready"


class SmokeFailure(Exception):
    def __init__(self, wheel: str, check: str, error: str) -> None:
        super().__init__(f"SMOKE FAILED: {wheel}: check '{check}': {error}")
        self.wheel, self.check, self.error = wheel, check, error


@dataclass
class Config:
    python: str
    work_dir: Path
    cache_dir: Path
    torch_wheel_dir: Path | None = None
    base_env: Path | None = None
    mpi: bool = False
    mkldnn: bool = False
    cuda_built: bool = False
    run_modules: tuple[str, ...] = ()
    tests: package_tests.PackageTests | None = None  # the package's own (request "test")


def spec_for(wheel: Path, cfg: Config) -> dict[str, object]:
    info = wheelfile.info(wheel)
    checks = list(PROJECT_CHECKS.get(info.project, []))
    if info.project == "torch":
        checks = ["torch-op"] + ["torch-mpi"] * cfg.mpi + ["torch-mkldnn"] * cfg.mkldnn
    if cfg.cuda_built and info.project != "torchvision":
        checks.append("torch-cuda")
    main = MAIN_MODULE.get(info.project)
    return {
        "wheel": wheel.name,
        "dist": info.project,
        "version": info.version,
        "modules": [main] if main else wheelfile.top_level_modules(wheel),
        "preload": [] if info.project == "torch" else ["torch"],  # every wheel but torch's runs beside torch
        "checks": checks,
        "group": GROUP,
        "entry_points": wheelfile.entry_points(wheel, GROUP),
        "run_modules": list(cfg.run_modules),
    }


def _one_wheel(directory: Path, project: str) -> Path:
    found = [w for w in sorted(directory.glob("*.whl")) if wheelfile.info(w).project == project]
    if len(found) != 1:
        raise FileNotFoundError(f"expected one {project} wheel in {directory}, found {len(found)}")
    return found[0]


def torch_env(cfg: Config, torch_wheel: Path) -> Path:
    """Where a torch wheel's passing smoke venv is kept: the base env its domain libraries reuse."""
    return cfg.cache_dir / "envs" / f"torch-{wheelfile.sha256_of(torch_wheel)[:16]}"


def base_env(wheel: Path, cfg: Config, python: str) -> Path | None:
    """The cached env the clean venv reaches through its .pth file (None: a self-contained venv)."""
    if wheelfile.info(wheel).project == "torch":
        # Optional extras (``; extra == "..."``) are not what a plain install pulls in.
        requires = [r for r in wheelfile.info(wheel).requires_dist if "extra" not in str(Requirement(r).marker or "")]
        return envs.cached_env(cfg.cache_dir, python, requires) if requires else None
    if cfg.torch_wheel_dir is not None:
        torch = _one_wheel(cfg.torch_wheel_dir, "torch")
        kept = torch_env(cfg, torch)
        if (kept / READY).exists():  # the torch wheel's own smoke venv: torch is installed there already
            return kept
        return envs.cached_env(cfg.cache_dir, python, [str(torch)], salt=wheelfile.sha256_of(torch))
    return cfg.base_env


def _torch_version(python: Path) -> str | None:
    code = "import importlib.metadata as m\ntry: print(m.version('torch'))\nexcept m.PackageNotFoundError: pass"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    return out or None


def _install(venv: Path, wheel: Path, base: Path | None, name: str) -> None:
    python = venv / "bin" / "python"
    argv = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-compile"]
    if name == "torch" and base is not None:
        argv.append("--no-deps")  # its dependencies are the base env's
    base_torch = _torch_version(python) if base is not None else None
    if base_torch and name != "torch":
        # Never a torch from an index: the one in the base env must satisfy the wheel.
        constraint = venv / "wf-constraints.txt"
        constraint.write_text(f"torch=={base_torch}\n", encoding="utf-8")
        argv += ["--constraint", str(constraint)]
    proc = subprocess.run([*argv, str(wheel)], capture_output=True, text=True)
    sys.stdout.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        raise SmokeFailure(wheel.name, "install", lines[-1] if lines else f"pip exited {proc.returncode}")


def _clean_env(venv: Path, cuda: bool) -> dict[str, str]:
    """What the probe and the package's tests run with: the venv first, a CUDA wheel without a GPU."""
    env = {
        "PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", str(venv)),
        "LANG": "C.UTF-8",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
    }  # no LD_LIBRARY_PATH: bundled libraries must be found through the wheel's own RPATHs
    if cuda:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _probe(
    venv: Path, wheel: Path, spec: dict[str, object], cuda: bool, extra: dict[str, str]
) -> list[dict[str, object]]:
    env = {**_clean_env(venv, cuda), **extra}
    argv = [str(venv / "bin" / "python"), "-I", str(PROBE), json.dumps(spec)]
    proc = subprocess.run(argv, cwd=venv, env=env, capture_output=True, text=True, timeout=900)
    results: list[dict[str, object]] = []
    began = "start"
    for line in (proc.stdout + proc.stderr).splitlines():
        if not line.startswith("WF-SMOKE "):
            print(f"  | {line}")
            continue
        event = json.loads(line[len("WF-SMOKE ") :])
        if "begin" in event:
            began = str(event["begin"])
        else:
            results.append(event)
            print(f"  {'ok  ' if event['ok'] else 'FAIL'} {event['check']}: {event['detail']}", flush=True)
    failed = [r for r in results if not r["ok"]]
    if failed:
        raise SmokeFailure(wheel.name, str(failed[0]["check"]), str(failed[0]["detail"]))
    if proc.returncode != 0:  # a crash (segfault, bus error, abort) inside a check: name the check it began
        how = signal.Signals(-proc.returncode).name if proc.returncode < 0 else f"exit status {proc.returncode}"
        raise SmokeFailure(wheel.name, began, f"the test process died ({how})")
    return results


def _smoke_in(venv: Path, wheel: Path, cfg: Config, python: str, base: Path | None) -> list[dict[str, object]]:
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    if base is None:
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
    else:
        subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
        envs.link_base(venv, base)
    _install(venv, wheel, base, wheelfile.info(wheel).project)
    driver = driver_standin.import_env(wheel, venv.parent) if cfg.cuda_built else {}  # no driver on this host
    results = _probe(venv, wheel, spec_for(wheel, cfg), cfg.cuda_built, driver)
    if cfg.tests is not None:
        passed, detail = package_tests.run(
            venv, cfg.tests, {**_clean_env(venv, cfg.cuda_built), **driver, "PYTHONDONTWRITEBYTECODE": "1"}
        )
        print(f"  {'ok  ' if passed else 'FAIL'} package tests: {detail}", flush=True)
        if not passed:
            raise SmokeFailure(wheel.name, "package tests", detail)
        results.append({"check": "package tests", "ok": True, "detail": detail})
    return results


def smoke_wheel(wheel: Path, cfg: Config) -> dict[str, object]:
    python = envs.find_python(cfg.python)
    print(f"smoke: {wheel.name} (Python {cfg.python})", flush=True)
    base = base_env(wheel, cfg, python)
    print(f"base env: {base or 'none (a self-contained venv)'}", flush=True)
    if wheelfile.info(wheel).project == "torch":
        # A clean venv like any other, but kept once it passes: the job's domain libraries then
        # smoke-test against it instead of unpacking torch (and its nvidia-* wheels) again.
        venv = torch_env(cfg, wheel)
        with envs.locked(venv.with_name(venv.name + ".lock")):
            results = _smoke_in(venv, wheel, cfg, python, base)
            (venv / READY).write_text(wheel.name, encoding="utf-8")
    else:
        venv = cfg.work_dir / wheel.name.removesuffix(".whl")
        results = _smoke_in(venv, wheel, cfg, python, base)
        shutil.rmtree(venv, ignore_errors=True)
    return {"wheel": wheel.name, "passed": True, "python": cfg.python, "checks": results}


def _tests(args: argparse.Namespace) -> package_tests.PackageTests | None:
    if not args.test_arg:
        return None
    project = (args.project or Path.cwd()).resolve()
    package = (args.package or project).resolve()
    return package_tests.PackageTests(tuple(args.test_arg), tuple(args.test_require), project, package)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m wfbuild.stages.smoke", description="Smoke-test wheels (see module doc)."
    )
    parser.add_argument("wheels", nargs="*", type=Path)
    parser.add_argument("--python", default=f"{sys.version_info[0]}.{sys.version_info[1]}")
    parser.add_argument("--wheel-dir", type=Path)
    parser.add_argument("--work-dir", type=Path, default=Path("smoke"))
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--torch-wheel-dir", type=Path, help="domain libraries: this job's repaired torch wheel")
    group.add_argument("--base-env", type=Path, help="extensions: the build env with torch==X")
    parser.add_argument("--mpi", action="store_true")
    parser.add_argument("--mkldnn", action="store_true")
    parser.add_argument("--cuda-built", action="store_true")
    parser.add_argument("--module", action="append", default=[], help="also run python -m MODULE")
    parser.add_argument("--test-arg", action="append", default=[], help="the package's tests: python's arguments")
    parser.add_argument("--test-require", action="append", default=[], help="what pip installs for them")
    parser.add_argument("--project", type=Path, help="{project} in --test-arg: the source's root")
    parser.add_argument("--package", type=Path, help="{package} in --test-arg: the folder of its setup.py")
    args = parser.parse_args(argv)
    wheels = list(args.wheels) + (sorted(args.wheel_dir.glob("*.whl")) if args.wheel_dir else [])
    if not wheels:
        print(f"SMOKE FAILED: no wheels in {args.wheel_dir}", file=sys.stderr)
        return 1
    cache = Path(os.environ.get("WF_CACHE_DIR") or args.work_dir / "cache")
    cfg = Config(
        args.python,
        args.work_dir.resolve(),
        cache.resolve(),
        args.torch_wheel_dir,
        args.base_env,
        args.mpi,
        args.mkldnn,
        args.cuda_built,
        tuple(args.module),
        _tests(args),
    )
    for wheel in wheels:
        result_path = wheel.with_name(wheel.name + ".smoke.json")
        try:
            result = smoke_wheel(wheel.resolve(), cfg)
        except SmokeFailure as exc:
            result_path.write_text(
                json.dumps({"wheel": wheel.name, "passed": False, "check": exc.check, "error": exc.error}),
                encoding="utf-8",
            )
            print(str(exc), file=sys.stderr, flush=True)
            return 1
        result_path.write_text(json.dumps(result, indent=1), encoding="utf-8")
        print(f"smoke passed: {wheel.name}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
