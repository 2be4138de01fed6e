"""Runs inside a smoke-test venv (``python -I smoke_probe.py SPEC_JSON``); standard library only.

Prints one ``WF-SMOKE {"begin": ...}`` line before each check and one ``WF-SMOKE {"check": ...,
"ok": ..., "detail": ...}`` line after it, so the parent can name the check a crash happened in.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import runpy
import sys
from collections.abc import Callable
from functools import partial
from typing import Any


def emit(**fields: Any) -> None:
    print("WF-SMOKE " + json.dumps(fields), flush=True)


def _norm(text: str) -> str:
    return text.strip().lower().replace("_", "-")


def check_version(spec: dict[str, Any]) -> str:
    found = str(importlib.metadata.version(spec["dist"]))
    if _norm(found) != _norm(spec["version"]):
        raise AssertionError(f"installed {spec['dist']} is {found}, the wheel says {spec['version']}")
    return found


def _module(name: str) -> Any:
    # Imported by name: the probe runs in a venv whose packages the type checker never sees.
    return importlib.import_module(name)


def _loaded(module: str) -> str:
    return str(getattr(_module(module), "__version__", module))


def check_import(module: str) -> str:
    mod = _module(module)
    where = str(os.path.realpath(getattr(mod, "__file__", None) or next(iter(getattr(mod, "__path__", [""])))))
    # The module must come from the wheel under test, not from the base env behind the .pth file.
    if not where.startswith(os.path.realpath(sys.prefix) + os.sep):
        raise AssertionError(f"{module} was imported from {where}, outside this venv ({sys.prefix})")
    return where


def torch_op() -> str:
    torch = _module("torch")

    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    got = (a @ a.T).tolist()
    if got != [[5.0, 14.0], [14.0, 50.0]]:
        raise AssertionError(f"matmul gave {got}")
    return f"torch {torch.__version__}: matmul ok, cuda={torch.version.cuda}, threads={torch.get_num_threads()}"


def torch_mpi() -> str:
    dist = _module("torch.distributed")

    if not dist.is_mpi_available():
        raise AssertionError("torch.distributed.is_mpi_available() is False")
    return "MPI backend available"


def torch_mkldnn() -> str:
    torch = _module("torch")

    if not torch.backends.mkldnn.is_available():
        raise AssertionError("torch.backends.mkldnn.is_available() is False")
    return "mkldnn available"


def torch_cuda() -> str:
    torch = _module("torch")

    if torch.version.cuda is None or not torch.backends.cuda.is_built():
        raise AssertionError(f"not a CUDA build (torch.version.cuda={torch.version.cuda})")
    # No GPU is needed (nor expected) here: the wheel must import and report its CUDA version.
    return f"torch.version.cuda={torch.version.cuda}, cuda available={torch.cuda.is_available()}"


def torchvision_nms() -> str:
    torch, torchvision = _module("torch"), _module("torchvision")

    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0], [50.0, 50.0, 60.0, 60.0]])
    scores = torch.tensor([0.9, 0.8, 0.7])
    keep = torchvision.ops.nms(boxes, scores, 0.5).tolist()
    if keep != [0, 2]:
        raise AssertionError(f"nms kept {keep}, expected [0, 2]")
    return f"torchvision {torchvision.__version__}: nms ok"


def torchaudio_resample() -> str:
    torch, torchaudio = _module("torch"), _module("torchaudio")

    out = torchaudio.functional.resample(torch.zeros(1, 16), 16, 8)
    if tuple(out.shape) != (1, 8):
        raise AssertionError(f"resample gave shape {tuple(out.shape)}")
    return f"torchaudio {torchaudio.__version__}: resample ok"


CHECKS: dict[str, Callable[[], str]] = {
    "torch-op": torch_op,
    "torch-mpi": torch_mpi,
    "torch-mkldnn": torch_mkldnn,
    "torch-cuda": torch_cuda,
    "torchvision-nms": torchvision_nms,
    "torchaudio-resample": torchaudio_resample,
}


def call_entry_point(dist: str, group: str, name: str) -> str:
    for ep in importlib.metadata.distribution(dist).entry_points:
        if ep.group == group and ep.name == name:
            ep.load()()
            return f"{ep.value} ok"
    raise LookupError(f"no entry point {name!r} in group {group!r}")


def run_module(module: str) -> str:
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise AssertionError(f"python -m {module} exited with {exc.code}") from None
    return f"python -m {module} ok"


def steps(spec: dict[str, Any]) -> list[tuple[str, Callable[[], str]]]:
    out: list[tuple[str, Callable[[], str]]] = [("version", partial(check_version, spec))]
    # A torch extension's modules (torch-harmonics' top-level disco_helpers, say) need libc10 loaded by
    # torch first, as every user has it: import torch before them (from wherever it is installed).
    out += [(f"import {m} (first)", partial(_loaded, m)) for m in spec.get("preload", [])]
    out += [(f"import {m}", partial(check_import, m)) for m in spec["modules"]]
    out += [(c, CHECKS[c]) for c in spec["checks"]]
    out += [
        (f"entry point {n}", partial(call_entry_point, spec["dist"], spec["group"], n)) for n in spec["entry_points"]
    ]
    out += [(f"python -m {m}", partial(run_module, m)) for m in spec["run_modules"]]
    return out


def main() -> int:
    spec = json.loads(sys.argv[1])
    failed = False
    for name, func in steps(spec):
        emit(begin=name)
        try:
            detail = func()
        except (Exception, SystemExit) as exc:  # report every failure as a result, keep going
            emit(check=name, ok=False, detail=f"{type(exc).__name__}: {exc}")
            failed = True
        else:
            emit(check=name, ok=True, detail=str(detail))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
