"""Runs inside a GPU test venv (``python -I gpu_probe.py SPEC_JSON``); standard library and torch only.

Prints one ``WF-GPU {...}`` line per check and a last ``WF-GPU {"verdict": ...}`` line:
- ``no-device``: torch sees no CUDA device (the emulator's GPU host, or a broken driver);
- ``not-testable``: the wheel holds no code this GPU can run (say arch 8.0 on an H100): for an extension
  its device code as read from the wheel's own bytes (``device_code``, wfbuild.gpu.gpu_test), else its arch list;
- ``passed`` / ``failed``: every check ran on the GPU; ``failed`` names the first check that did not pass,
  or says the wheels hold no device code, or none for this GPU although their arch list asks for it.
The arch rule is wfbuild/cuda/archrule.py, loaded by its path (this file runs outside the bundle's package); the
planner (functions/wheelfoundry/planning/gpu_tests.py, which cannot import the bundle) applies the same rule, and
tests/test_gpu_tests.py holds the two to the same answers.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

RULE = Path(__file__).resolve().parents[1] / "cuda" / "archrule.py"


def archrule() -> ModuleType:
    """wfbuild/cuda/archrule.py of the bundle this file is in, as a module of its own (the probe's venv has no
    wfbuild)."""
    if "wf_archrule" not in sys.modules:
        spec = importlib.util.spec_from_file_location("wf_archrule", RULE)
        if spec is None or spec.loader is None:
            raise ImportError(f"no {RULE}")
        module = importlib.util.module_from_spec(spec)
        sys.modules["wf_archrule"] = module  # dataclasses look their module up while the file executes
        spec.loader.exec_module(module)
    return sys.modules["wf_archrule"]


def emit(**fields: Any) -> None:
    print("WF-GPU " + json.dumps(fields), flush=True)


def parse_arch_list(arch_list: str) -> list[tuple[int, int, str, bool]]:
    """'8.0;9.0a;12.0+PTX' -> [(8, 0, '', False), (9, 0, 'a', False), (12, 0, '', True)]."""
    entries = []
    for item in filter(None, re.split(r"[;,\s]+", arch_list.strip())):
        match = re.fullmatch(r"(\d+)\.(\d+)([af]?)(\+PTX)?", item)
        if not match:
            raise ValueError(f"not a CUDA arch: {item!r}")
        entries.append((int(match[1]), int(match[2]), match[3], bool(match[4])))
    return entries


def covers(arch_list: str, capability: tuple[int, int]) -> bool:
    """Whether a build for ``arch_list`` holds code a GPU of ``capability`` runs.

    SASS for X.Y runs on X.Z with Z >= Y (an 'a' build only on X.Y itself); PTX for X.Y is compiled
    by the driver for any newer GPU (NVIDIA's CUDA compatibility guide; wfbuild/cuda/archrule.py).
    """
    parse_arch_list(arch_list)  # its error names the malformed entry
    rule = archrule()
    return bool(rule.covers(rule.codes_of_arch_list(arch_list), capability))


def device_verdict(spec: dict[str, Any], gpu: str, capability: tuple[int, int]) -> tuple[str, str] | None:
    """(verdict, detail) when the wheels' own device code rules the GPU out; None: it runs here (or unread)."""
    files = spec.get("device_code")
    if files is None:
        return None
    rule = archrule()
    held = {f["file"]: [rule.Code.parse(n) for n in f["codes"]] for f in files if f["codes"]}
    sm = f"sm_{capability[0]}{capability[1]}"
    if not held:
        return "failed", "no compiled file of the wheels holds device code (no .nv_fatbin): a CUDA build of CPU code"
    if any(rule.covers(codes, capability) for codes in held.values()):
        return None
    found = "; ".join(f"{name.rsplit('/', 1)[-1]}: {' '.join(c.name for c in codes)}" for name, codes in held.items())
    if covers(spec["arch_list"], capability):
        return "failed", f"arch list {spec['arch_list']} asks for code {gpu} ({sm}) runs, the wheels hold only {found}"
    return "not-testable", f"the wheels' device code holds nothing {gpu} ({sm}) runs: {found}"


def _torch() -> Any:
    return importlib.import_module("torch")


def check_matmul() -> str:
    torch = _torch()
    a, b = torch.randn(512, 256, dtype=torch.float64), torch.randn(256, 128, dtype=torch.float64)
    diff = float(((a.cuda() @ b.cuda()).cpu() - a @ b).abs().max())
    assert diff < 1e-9, f"cuda matmul differs from the CPU's by {diff}"
    return f"max |diff| {diff:.1e}"


def check_conv() -> str:
    torch = _torch()
    x, w = torch.randn(2, 3, 32, 32, dtype=torch.float64), torch.randn(8, 3, 3, 3, dtype=torch.float64)
    conv = torch.nn.functional.conv2d
    diff = float((conv(x.cuda(), w.cuda(), padding=1).cpu() - conv(x, w, padding=1)).abs().max())
    assert diff < 1e-9, f"cuda conv2d differs from the CPU's by {diff}"
    return f"max |diff| {diff:.1e}"


def check_nccl() -> str:
    torch = _torch()
    dist = importlib.import_module("torch.distributed")
    store = dist.HashStore()
    dist.init_process_group("nccl", store=store, rank=0, world_size=1)
    try:
        t = torch.ones(4, device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
        assert t.tolist() == [1.0] * 4, t.tolist()
        return f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}"
    finally:
        dist.destroy_process_group()


def check_arch_list(arch_list: str) -> str:
    have = set(_torch().cuda.get_arch_list())
    want = {f"sm_{a}{b}{v}" for a, b, v, _ in parse_arch_list(arch_list)}
    missing = sorted(want - have)
    assert not missing, f"torch.cuda.get_arch_list() lacks {missing} (has {sorted(have)})"
    return " ".join(sorted(have))


def check_import(module: str) -> str:
    loaded = importlib.import_module(module)
    return str(getattr(loaded, "__file__", module))


def call_entry_point(dist: str, name: str) -> str:
    for entry in importlib.metadata.distribution(dist).entry_points:
        if entry.group == "wheelfoundry_smoke" and entry.name == name:
            return str(entry.load()())
    raise LookupError(f"{dist} has no wheelfoundry_smoke entry point {name!r}")


def check_tests(tests: str) -> str:
    # -c /dev/null: the tests' own folder decides nothing (a repository's pytest settings, its conftest path)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--import-mode=importlib"]
    argv += ["-c", os.devnull, "--rootdir", os.getcwd()]
    proc = subprocess.run([*argv, tests], capture_output=True, text=True, timeout=1800)
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
    assert proc.returncode == 0, "the package's tests failed:\n" + "\n".join(tail)
    return tail[-1] if tail else "no output"


def checks(spec: dict[str, Any]) -> list[tuple[str, Callable[[], str]]]:
    found: list[tuple[str, Callable[[], str]]] = [(f"import {m}", partial(check_import, m)) for m in spec["modules"]]
    if spec["kind"] == "torch":
        found += [("matmul", check_matmul), ("conv2d", check_conv), ("nccl", check_nccl)]
        found.append(("arch-list", lambda: check_arch_list(spec["arch_list"])))
    for dist, name in spec.get("entry_points", []):
        found.append((f"entry point {name}", partial(call_entry_point, dist, name)))
    if spec.get("tests"):
        found.append(("package tests", lambda: check_tests(spec["tests"])))
    return found


def main(spec: dict[str, Any]) -> int:
    torch = _torch()
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        emit(verdict="no-device", gpu="", capability="", detail=f"torch {torch.__version__} sees no CUDA device")
        return 0
    gpu, capability = torch.cuda.get_device_name(0), tuple(torch.cuda.get_device_capability(0))
    where = {"gpu": gpu, "capability": "{}.{}".format(*capability), "driver_cuda": torch.version.cuda}
    ruled_out = device_verdict(spec, gpu, capability)
    if ruled_out is None and spec.get("device_code") is None and not covers(spec["arch_list"], capability):
        detail = f"arch list {spec['arch_list']} holds no code for {gpu} (sm_{capability[0]}{capability[1]})"
        ruled_out = "not-testable", detail
    if ruled_out is not None:
        emit(verdict=ruled_out[0], detail=ruled_out[1], **where)
        return 1 if ruled_out[0] == "failed" else 0
    if spec.get("device_code") is not None:
        runs = [f["file"].rsplit("/", 1)[-1] for f in spec["device_code"] if f["codes"]]
        emit(check="device code", ok=True, detail=f"{', '.join(runs)} hold code sm_{capability[0]}{capability[1]} runs")
    for name, check in checks(spec):
        emit(begin=name)
        try:
            detail = check()
        except Exception as exc:
            emit(check=name, ok=False, detail=f"{type(exc).__name__}: {exc}")
            traceback.print_exc()
            emit(verdict="failed", failed=name, detail=f"{type(exc).__name__}: {exc}", **where)
            return 1
        emit(check=name, ok=True, detail=detail)
    emit(verdict="passed", detail="every check passed", **where)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NCCL_DEBUG", "WARN")
    raise SystemExit(main(json.loads(sys.argv[1])))
