"""Python build environments: one venv per Python version, optionally backed by a shared cache.

Without a cache each environment is a full venv with its packages installed. With ``WF_CACHE_DIR``
(host mode, local runs) the packages live in a cached *base env* keyed by (interpreter, packages,
index), created once under a file lock and reused by every later job; the job's own environment
is then a thin venv (no pip of its own) whose ``_wf_base.pth`` adds the base env's site-packages
with ``site.addsitedir``. The thin venv still installs into its own site-packages (a wheel under
test, the torch wheel a domain library builds against), which come first on sys.path, so
they shadow the base env's copy; pip runs from the base env through the same path entry.

``python -m wfbuild.envs --python 3.11 --dest DIR [--torch torch==2.5.1 [--index-url URL]]
[--requirements FILE] [--pip PKG ...]``
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from wfbuild.safety import PYTHON, check

BASE_PTH = "_wf_base.pth"
LINKED_TOOLS = ("ninja", "cmake")  # binaries the thin venv's PATH must see (cpp_extension runs ninja)


def python_candidates(version: str, environ: Mapping[str, str]) -> list[str]:
    """Where a CPython ``3.11`` may live, in the order every executor and host mode looks (one rule):
    WF_PYTHON_3_11; manylinux's /opt/python; this interpreter; pyenv's installs ($PYENV_ROOT/versions,
    the real interpreters, never its shims); uv's managed Pythons ($UV_PYTHON_INSTALL_DIR or
    ~/.local/share/uv/python); then python3.11 on PATH."""
    tag = "cp" + version.replace(".", "")
    found = [environ.get("WF_PYTHON_" + version.replace(".", "_"), ""), f"/opt/python/{tag}-{tag}/bin/python"]
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        found.append(sys.executable)
    home = Path(environ.get("HOME") or Path.home())
    pyenv = Path(environ.get("PYENV_ROOT") or home / ".pyenv") / "versions"
    found += [str(p) for p in sorted(pyenv.glob(f"{version}.*/bin/python{version}"), reverse=True)]
    uv = Path(environ.get("UV_PYTHON_INSTALL_DIR") or home / ".local" / "share" / "uv" / "python")
    found += [str(p) for p in sorted(uv.glob(f"cpython-{version}.*-linux-*/bin/python{version}"), reverse=True)]
    shims = {str(pyenv.parent / "shims")}
    for folder in environ.get("PATH", os.defpath).split(os.pathsep):
        if folder and folder not in shims and os.access(os.path.join(folder, f"python{version}"), os.X_OK):
            found.append(os.path.join(folder, f"python{version}"))
    return list(dict.fromkeys(filter(None, found)))


def find_python(version: str, environ: Mapping[str, str] | None = None) -> str:
    """The interpreter for ``3.11`` (python_candidates' order); the error names what to set."""
    environ = os.environ if environ is None else environ
    check(PYTHON, version, "python")
    candidates = python_candidates(version, environ)
    for candidate in candidates:
        if _version_of(candidate) == version:
            return candidate
    var = "WF_PYTHON_" + version.replace(".", "_")
    tried = ", ".join(candidates) or "nothing: no manylinux, pyenv, uv or PATH interpreter of that version"
    raise FileNotFoundError(
        f"no Python {version} on this machine: install it (e.g. `uv python install {version}` or "
        f"`pyenv install {version}`) or set {var}=/path/to/python{version} (tried {tried})"
    )


def _version_of(python: str) -> str | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def site_packages(python: str | Path) -> str:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def _run(argv: Sequence[str]) -> None:
    print("+", " ".join(argv), flush=True)
    subprocess.run(list(argv), check=True)


def _install(
    python: Path, pips: Sequence[str], requirements: Path | None, torch: str | None, index: str | None
) -> None:
    # --no-compile: a build environment imports a few hundred of torch's thousands of modules; Python
    # writes their .pyc on first import, and pip would spend most of an install compiling the rest.
    base = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-compile"]
    if pips or requirements:
        _run([*base, *(["-r", str(requirements)] if requirements else []), *pips])
    if torch:
        # The torch index serves torch's dependencies too (PyTorch's documented install command).
        _run([*base, *(["--index-url", index] if index else []), torch])


def full_env(
    dest: Path,
    python: str,
    pips: Sequence[str],
    requirements: Path | None = None,
    torch: str | None = None,
    index: str | None = None,
) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    _run([python, "-m", "venv", str(dest)])
    _install(dest / "bin" / "python", pips, requirements, torch, index)
    return dest


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# pip's settings from the environment that change which files it picks (a find-links folder holding a CPU build
# of a release wins over the index's CUDA build of it): part of what a cached environment is.
PIP_SOURCES = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_CONSTRAINT",
               "PIP_CONFIG_FILE")  # fmt: skip


def cache_key(
    python: str,
    pips: Sequence[str],
    requirements: Path | None,
    torch: str | None,
    index: str | None,
    salt: str = "",
    environ: Mapping[str, str] | None = None,
) -> str:
    """The cached environment's name: what it was made of and where pip looked (the same torch spec resolves to
    another file when pip's environment points it elsewhere)."""
    environ = os.environ if environ is None else environ
    ident = {
        "salt": salt,  # e.g. the sha256 of a wheel file named in pips
        "pip_sources": {name: environ[name] for name in PIP_SOURCES if name in environ},
        "python": os.path.realpath(python),
        "version": sys.version if python == sys.executable else _full_version(python),
        "pips": sorted(pips),
        "requirements": requirements.read_text(encoding="utf-8") if requirements else None,
        "torch": torch,
        "index": index,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def _full_version(python: str) -> str:
    out = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def cached_env(
    cache_dir: Path,
    python: str,
    pips: Sequence[str],
    requirements: Path | None = None,
    torch: str | None = None,
    index: str | None = None,
    salt: str = "",
) -> Path:
    """A full venv with these packages under ``cache_dir/envs``, built once, then reused."""
    key = cache_key(python, pips, requirements, torch, index, salt)
    base = cache_dir / "envs" / key
    with locked(cache_dir / "envs" / f"{key}.lock"):
        if (base / ".wf-ready").exists():
            print(f"reusing cached environment {base}", flush=True)
            return base
        # Built in place (venv scripts hold absolute paths, so a venv cannot be moved); the marker,
        # written last, tells a half-built env left by a killed job from a finished one.
        full_env(base, python, pips, requirements, torch, index)
        sources = {name: os.environ[name] for name in PIP_SOURCES if name in os.environ}
        ready = {"python": python, "pips": list(pips), "torch": torch, "pip_sources": sources}
        (base / ".wf-ready").write_text(json.dumps(ready))
        return base


def thin_env(dest: Path, python: str, base: Path) -> Path:
    """A venv without packages of its own that sees ``base``'s site-packages through a .pth file."""
    if dest.exists() or dest.is_symlink():
        shutil.rmtree(dest)
    _run([python, "-m", "venv", "--without-pip", str(dest)])
    link_base(dest, base)
    return dest


def link_base(dest: Path, base: Path) -> None:
    site = Path(site_packages(dest / "bin" / "python"))
    # addsitedir (not a bare path line) so the base env's own .pth files are honoured too.
    line = f"import site; site.addsitedir({json.dumps(site_packages(base / 'bin' / 'python'))})\n"
    (site / BASE_PTH).write_text(line, encoding="utf-8")
    for tool in LINKED_TOOLS:
        target, link = base / "bin" / tool, dest / "bin" / tool
        if target.exists() and not link.exists():
            link.symlink_to(target)


def create(
    dest: Path,
    version: str,
    pips: Sequence[str],
    requirements: Path | None = None,
    torch: str | None = None,
    index: str | None = None,
    cache_dir: Path | None = None,
) -> Path:
    python = find_python(version)
    if cache_dir is None:
        return full_env(dest, python, pips, requirements, torch, index)
    base = cached_env(cache_dir, python, pips, requirements, torch, index)
    return thin_env(dest, python, base)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wfbuild.envs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="CPython version, e.g. 3.11")
    parser.add_argument("--dest", required=True, type=Path)
    parser.add_argument("--torch", help="a torch requirement, e.g. torch==2.5.1")
    parser.add_argument("--index-url", help="where torch comes from (default: this host's pip configuration)")
    parser.add_argument("--requirements", type=Path, help="a requirements file (torch's own requirements.txt)")
    parser.add_argument("--pip", action="append", default=[], help="a further package (repeatable)")
    parser.add_argument("--expect-cuda", help="the CUDA version torch must be built with (a CUDA cell)")
    args = parser.parse_args(argv)
    cache = os.environ.get("WF_CACHE_DIR")
    env = create(
        args.dest, args.python, args.pip, args.requirements, args.torch, args.index_url, Path(cache) if cache else None
    )
    if args.expect_cuda:
        problem = cuda_problem(env, args.expect_cuda)
        if problem:
            print(f"wfbuild.envs: {problem}", file=sys.stderr, flush=True)
            return 1
    print(f"environment ready: {env}")
    return 0


# torch's version and CUDA as torch/version.py states them, read without importing the package
TORCH_VERSION_PROBE = (
    "import importlib.util, os, runpy; spec = importlib.util.find_spec('torch'); "
    "v = runpy.run_path(os.path.join(os.path.dirname(spec.origin), 'version.py')); "
    "print(v['__version__'], v.get('cuda') or 'none')"
)


def cuda_problem(env: Path, expected: str) -> str | None:
    """A CUDA extension built against a torch without that CUDA would be mislabelled: refuse it.

    torch.version is torch/version.py, which setup.py writes and ``import torch`` only re-exports: read
    there, the answer is the same without loading libtorch (4-5 s of every CUDA cell's env stage). Whether
    torch imports is the smoke stage's question, asked of the built wheel."""
    python = str(env / "bin" / "python")
    out = subprocess.run([python, "-c", TORCH_VERSION_PROBE], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return f"no torch/version.py in {env}: {out.stderr.strip()[-500:]}"
    version, cuda = out.stdout.split()[-2:]
    if cuda == "none" or cuda.split(".")[:2] != expected.split(".")[:2]:
        return (
            f"torch {version} in the build environment is built for CUDA {cuda}, but this cell needs CUDA "
            f"{expected}: use torch_index 'pytorch' or a pip configuration that serves the CUDA build"
        )
    return None


if __name__ == "__main__":
    raise SystemExit(main())
