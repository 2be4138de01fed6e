"""The CUDA driver's link stub (``lib64/stubs/libcuda.so``), made from the locked toolkit's own ``cuda.h``.

    python3 driver_stub.py CUDA_HOME [--cc CC]

NVIDIA's toolkit ships ``lib64/stubs/libcuda.so`` so that code calling the driver API (``cuMemCreate``,
``cuTensorMapEncodeTiled``: ``-lcuda``) links on a machine without a driver. CUDA 11/12 locks carry it in
the cuda_cudart redist archive (install_cuda.py places its lib/stubs/ at lib64/stubs/); no nvidia-* wheel
on PyPI does, so a CUDA 13 home assembled from wheels failed with ``ld: cannot find -lcuda``.

The stub is made from bytes the lock already pins: the toolkit's ``include/cuda.h`` is preprocessed by
the host C compiler, which resolves its renames (``#define cuMemAlloc cuMemAlloc_v2``, the per-thread
``_ptds``/``_ptsz`` names) to the symbols a linker will look for; each declared driver function gets an
empty definition, and the result is linked with SONAME ``libcuda.so.1``. A binary linked against it
records ``NEEDED libcuda.so.1``: the user's driver at run time. Only the unversioned ``libcuda.so`` is
written, and only under stubs/ (as NVIDIA does): a ``libcuda.so.1`` on a search path would shadow the
driver. Were it loaded anyway, every function returns CUDA_ERROR_STUB_LIBRARY (34), as NVIDIA's does.
Deterministic: sorted names, a fixed source name, no timestamps. Python 3.11+, standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

SONAME = "libcuda.so.1"
STUB = Path("lib64") / "stubs" / "libcuda.so"
# The headers whose functions live in libcuda (cudaProfiler.h: cuProfilerStart/Stop). The graphics
# interop headers (cudaGL.h, cudaEGL.h, cudaVDPAU.h) need system headers a build image may lack.
HEADERS = ("cuda.h", "cudaProfiler.h")
# Each spelling cuda.h can give a call: the default one, per-thread default stream, and NVIDIA's own
# internal view (which also declares the unsuffixed legacy names: older objects link against those).
VIEWS = ((), ("-DCUDA_API_PER_THREAD_DEFAULT_STREAM",), ("-D__CUDA_API_VERSION_INTERNAL",))
DECLARED = re.compile(r"\bCUresult\s+(cu[A-Za-z0-9_]+)\s*\(")
STUB_LIBRARY_ERROR = 34  # CUDA_ERROR_STUB_LIBRARY


class StubError(Exception):
    """The stub could not be made (no compiler, a header the compiler rejects)."""


def driver_names(include: Path, cc: str = "cc") -> list[str]:
    """Every driver function ``include``'s headers declare, as the linker sees them, sorted."""
    wanted = "".join(f"#include <{h}>\n" for h in HEADERS if (include / h).is_file())
    names: set[str] = set()
    for defines in VIEWS:
        argv = [cc, "-E", "-P", *defines, f"-I{include}", "-x", "c", "-"]
        try:
            done = subprocess.run(argv, input=wanted, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise StubError(f"cannot run the C compiler {cc!r}: {exc}") from exc
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines()
            raise StubError(f"{' '.join(argv)}: {next((ln for ln in lines if 'error' in ln), lines[-1:])}")
        names.update(DECLARED.findall(done.stdout))
    if not names:
        raise StubError(f"{include / 'cuda.h'} declares no driver function")
    return sorted(names)


def stub_source(names: list[str]) -> str:
    """One definition per name: the linker needs the symbols, never their signatures."""
    head = "/* The CUDA driver's link stub, generated from cuda.h by driver_stub.py. Never loaded. */\n"
    return head + "".join(f"int {name}(void) {{ return {STUB_LIBRARY_ERROR}; }}\n" for name in names)


def compile_stub(names: list[str], out: Path, cc: str = "cc") -> None:
    with tempfile.TemporaryDirectory(prefix="wf-libcuda-") as tmp:
        # A relative source name: the object's file symbol must not carry the scratch folder's name.
        (Path(tmp) / "libcuda_stub.c").write_text(stub_source(names), encoding="utf-8")
        argv = [cc, "-shared", "-fPIC", "-O2", "-nostdlib", f"-Wl,-soname,{SONAME}", "-o", "libcuda.so"]
        done = subprocess.run([*argv, "libcuda_stub.c"], cwd=tmp, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise StubError(f"{' '.join(argv)}: {done.stderr.strip()[-2000:]}")
        out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(Path(tmp) / "libcuda.so", out)
        out.chmod(0o755)


def ensure(home: Path, cc: str | None = None) -> dict[str, object] | None:
    """Give ``home`` a driver stub unless it has NVIDIA's (kept) or no ``include/cuda.h`` (nothing to
    link against). Returns what wf-toolkit.json records about it, None when there is no stub at all."""
    stub = home / STUB
    if stub.exists() or stub.is_symlink():
        return {"libcuda.so": "nvidia"}  # the redist archive's own stub
    header = home / "include" / "cuda.h"
    if not header.is_file():
        return None
    cc = cc or "cc"  # the image's host compiler (gcc-toolset on PATH); never $CC, which may name a wrapper
    names = driver_names(home / "include", cc)
    compile_stub(names, stub, cc)
    return {
        "libcuda.so": "generated",
        "from": "include/cuda.h",
        "cuda_h_sha256": hashlib.sha256(header.read_bytes()).hexdigest(),
        "symbols": len(names),
        "sha256": hashlib.sha256(stub.read_bytes()).hexdigest(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("home", type=Path, help="the CUDA_HOME to give a lib64/stubs/libcuda.so")
    parser.add_argument("--cc", help="the host C compiler (default: cc)")
    args = parser.parse_args(argv)
    try:
        record = ensure(args.home, args.cc)
    except (StubError, OSError) as exc:
        print(f"driver_stub: {exc}", file=sys.stderr)
        return 1
    print(f"driver_stub: {args.home / STUB}: {record}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
