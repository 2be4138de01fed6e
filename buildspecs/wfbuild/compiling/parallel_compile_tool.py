"""The build stage's side of wfbuild.compiling.parallel_compile: put the hook into a build environment, name a
source's build backend, and sum up what the hook recorded in one line for the build's log.

    python3 -m wfbuild.compiling.parallel_compile_tool install --python ENV/bin/python
    python3 -m wfbuild.compiling.parallel_compile_tool backend --src DIR
    python3 -m wfbuild.compiling.parallel_compile_tool summary --log WF_PARALLEL_LOG
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

from wfbuild.compiling import parallel_compile

HOOK = "_wf_parallel_compile"  # the hook's module name inside a build environment


def install(python: str) -> str:
    """Copy the hook (wfbuild.compiling.parallel_compile's file) into the environment's site-packages with a .pth line
    that imports it."""
    probe = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    shutil.copyfile(parallel_compile.__file__, os.path.join(site, f"{HOOK}.py"))
    with open(os.path.join(site, f"{HOOK}.pth"), "w", encoding="utf-8") as handle:
        handle.write(f"import {HOOK}; {HOOK}.install_hook()\n")
    return site


def backend(src: str) -> str:
    """The source's PEP 517 backend module (pyproject.toml's build-backend), or setuptools' default."""
    try:
        with open(os.path.join(src, "pyproject.toml"), encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return "setuptools"
    found = re.search(r"""^\s*build-backend\s*=\s*["']([A-Za-z0-9_.:]+)["']""", text, re.MULTILINE)
    return found.group(1).split(".")[0].split(":")[0] if found else "setuptools"


def summary(log: str) -> str:
    """The build's parallel compiles, one line (build-library.sh prints it)."""
    try:
        with open(log, encoding="utf-8") as handle:
            entries = [json.loads(line) for line in handle if line.strip()]
    except (OSError, ValueError):
        entries = []
    steps = [e for e in entries if "units" in e]
    parts = [
        f"{e['extensions']} extensions in {e['chains']} chains side by side, up to {e['jobs']} compilers at once"
        for e in entries
        if "chains" in e
    ]
    if steps:
        units, peak = sum(e["units"] for e in steps), max(e["peak"] for e in steps)
        threads = sorted({e["nvcc_threads"] for e in steps if e.get("nvcc_threads")})
        cuda = f", nvcc --threads {'/'.join(map(str, threads))} for CUDA units" if threads else ""
        parts.insert(
            0, f"{units} translation unit(s) in {len(steps)} compile step(s), at most {peak} compilers at once{cuda}"
        )
    return "; ".join(parts) or "no compile step with more than one translation unit ran in parallel"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python3 -m wfbuild.compiling.parallel_compile_tool", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="put the hook into a build environment").add_argument("--python", required=True)
    sub.add_parser("backend", help="print the source's build backend").add_argument("--src", required=True)
    sub.add_parser("summary", help="one line from WF_PARALLEL_LOG").add_argument("--log", required=True)
    args = parser.parse_args(argv)
    if args.command == "install":
        print(install(args.python))
    elif args.command == "backend":
        print(backend(args.src))
    else:
        print(summary(args.log))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
