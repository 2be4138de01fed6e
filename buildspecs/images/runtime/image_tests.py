"""Image tests, run with the image's Python before the push (and in host mode in the image's venv).

``python image_tests.py --import torch --import wf_tiny_ext --user wf --uid 1000 --gid 1000 --tz UTC
[--arch-list 8.6] [--require-gpu] [--host]``. Checks: each module imports (and torch runs a matmul),
the process runs as the non-root user with its UID/GID, the time zone is TZ (and /etc/localtime points
at it), TORCH_CUDA_ARCH_LIST, no compiler on PATH, and with a GPU ``torch.cuda.is_available()`` and a
small kernel. ``--host`` (host mode: a venv, not an image) skips the user, /etc/localtime and compiler
checks, which describe the image's filesystem, and says so. Prints one JSON object; exits 1 on a failure.
Standard library only: it runs before anything but the installed wheels is trusted.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import time
import zoneinfo
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

COMPILERS = ("gcc", "cc", "g++", "c++", "clang", "nvcc")


def _torch_op() -> str:
    torch = importlib.import_module("torch")
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    value = float((a @ a.T).sum())  # [[5, 14], [14, 50]]
    if value != 83.0:
        raise AssertionError(f"matmul gave {value}, expected 83.0")
    return str(torch.__version__)


def _cuda(require: bool) -> str:
    torch = importlib.import_module("torch")
    if not torch.cuda.is_available():
        if require:
            raise AssertionError("torch.cuda.is_available() is False on a GPU host")
        return "skipped: no GPU visible"
    x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    got = float((x * 2).sum().item())
    want = float((torch.arange(1 << 20, dtype=torch.float64) * 2).sum())
    if abs(got - want) > want * 1e-6:
        raise AssertionError(f"kernel gave {got}, expected {want}")
    return f"{torch.cuda.get_device_name(0)}: kernel ok"


def _user(name: str, uid: int, gid: int) -> str:
    import pwd

    if os.getuid() == 0:
        raise AssertionError("runs as root")
    entry = pwd.getpwuid(os.getuid())
    found = (entry.pw_name, os.getuid(), os.getgid())
    if found != (name, uid, gid):
        raise AssertionError(f"runs as {found}, expected {(name, uid, gid)}")
    return f"{name} {uid}:{gid}"


def _tz(tz: str, host: bool) -> str:
    if os.environ.get("TZ") != tz:
        raise AssertionError(f"TZ is {os.environ.get('TZ')!r}, expected {tz!r}")
    offset = datetime.now(zoneinfo.ZoneInfo(tz)).utcoffset()
    local = time.localtime().tm_gmtoff
    if offset is None or int(offset.total_seconds()) != local:
        raise AssertionError(f"local time is UTC{local:+d}s, {tz} is {offset}")
    if not host and not str(Path("/etc/localtime").resolve()).endswith(tz):
        raise AssertionError(f"/etc/localtime is {Path('/etc/localtime').resolve()}, not {tz}")
    return tz


def _arch_list(expected: str) -> str:
    if os.environ.get("TORCH_CUDA_ARCH_LIST", "") != expected:
        raise AssertionError(f"TORCH_CUDA_ARCH_LIST is {os.environ.get('TORCH_CUDA_ARCH_LIST')!r}, not {expected!r}")
    return expected or "(unset)"


def _no_compiler() -> str:
    found = [c for c in COMPILERS if shutil.which(c)]
    if found:
        raise AssertionError(f"compilers left in the runtime image: {', '.join(found)}")
    return "none"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--import", dest="modules", action="append", default=[])
    parser.add_argument("--user", default="wf")
    parser.add_argument("--uid", type=int, default=1000)
    parser.add_argument("--gid", type=int, default=1000)
    parser.add_argument("--tz", default="UTC")
    parser.add_argument("--arch-list", default="")
    parser.add_argument("--require-gpu", action="store_true")
    parser.add_argument("--host", action="store_true")
    args = parser.parse_args(argv)
    checks: list[tuple[str, Callable[[], str]]] = []
    for module in args.modules:
        checks.append((f"import {module}", lambda m=module: str(getattr(importlib.import_module(m), "__file__", ""))))
    if "torch" in args.modules:
        checks += [("torch matmul", _torch_op), ("torch cuda", lambda: _cuda(args.require_gpu))]
    checks += [("time zone", lambda: _tz(args.tz, args.host)), ("arch list", lambda: _arch_list(args.arch_list))]
    if not args.host:
        checks += [("user", lambda: _user(args.user, args.uid, args.gid)), ("no compiler", _no_compiler)]
    results, failed = {}, []
    for name, check in checks:
        try:
            results[name] = {"ok": True, "detail": check()}
        except Exception as exc:  # every failure is reported, then the exit status says it
            results[name] = {"ok": False, "detail": f"{type(exc).__name__}: {exc}"}
            failed.append(name)
    if args.host:
        results["user"] = results["no compiler"] = {"ok": None, "detail": "skipped: host mode (no image filesystem)"}
    print(json.dumps({"python": sys.version.split()[0], "checks": results, "failed": failed}))
    for name in failed:
        print(f"IMAGE TEST FAILED: {name}: {results[name]['detail']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
