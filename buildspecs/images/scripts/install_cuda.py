"""Assemble a CUDA toolkit (CUDA_HOME) from one lock: NVIDIA's published artifacts, each checked by sha256.

    python3 install_cuda.py --cuda 12.4 --prefix /usr/local/cuda-12.4 [--requirements FILE] [--platform P]

The lock ``cuda/cuda-<X.Y>-<platform>.toml`` beside this file lists (tools/lock_cuda.py writes it):
- ``[[archive]]``: NVIDIA's redistributable archives (developer.download.nvidia.com/compute/cuda/redist),
  the compiler and core toolkit of CUDA 11/12, whose sha256 come from NVIDIA's redistrib_<release>.json,
  itself pinned by its own sha256 in public build code (the lock names where);
- ``[[wheel]]``: NVIDIA's wheels on PyPI with PyPI's published sha256: the whole compiler of CUDA 13
  (``part = "compiler"``, always installed) and the libraries torch links (``part = "library"``);
- ``[requirements]``: each requirement string the catalog pins (a slim wheel's Requires-Dist) mapped to
  the locked wheels it stands for. Only the libraries the given requirements name are installed, so a
  build compiles against exactly the nvidia-* wheels its users install.
A download whose bytes differ from the lock is deleted and the install fails; a requirement the lock
does not hold fails before anything is downloaded. Wheels come through ``pip download --require-hashes``
(so pip's configured index or mirror applies), archives over https (``WF_CUDA_REDIST_URL`` replaces the
base URL, e.g. a file:// mirror). The result is the usual layout: bin/, include/, lib64/ (lib -> lib64),
nvvm/, targets/<arch>-linux/{include,lib}, unversioned .so links for the linker, the driver's link stub
lib64/stubs/libcuda.so (the cudart archive's, else driver_stub.py's from the locked cuda.h), wf-toolkit.json.
Python 3.11+, standard library only: it runs in the builder image and on a host-mode build machine.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.util
import json
import os
import platform as platform_module
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import urllib.request
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LOCKS = HERE / "cuda"
PLATFORMS = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
TARGET_DIRS = {"x86_64": "x86_64-linux", "aarch64": "sbsa-linux"}
MERGED = ("bin", "include", "lib", "lib64", "nvvm", "share")  # what a wheel's nvidia/<part>/ contributes
MARKER = "wf-toolkit.json"
LAYOUT = 2  # what install() makes of a lock (2: + the driver stub); in host mode's cache key, so never stale


class LockError(Exception):
    """The lock cannot give what was asked (a missing lock, an unlocked requirement, wrong bytes)."""


def lock_path(cuda: str, platform: str, locks: Path | None = None) -> Path:
    return (locks or LOCKS) / f"cuda-{cuda}-{platform}.toml"


def load_lock(cuda: str, platform: str, locks: Path | None = None) -> dict[str, Any]:
    path = lock_path(cuda, platform, locks)
    locks = path.parent
    if not path.is_file():
        have = sorted(p.stem.removeprefix("cuda-") for p in locks.glob("cuda-*.toml"))
        raise LockError(f"no CUDA {cuda} lock for {platform} ({path.name}); locked: {', '.join(have) or 'none'}")
    return tomllib.loads(path.read_text(encoding="utf-8"))


def is_toolkit_requirement(line: str) -> bool:
    """Requirements that are CUDA toolkit parts (nvidia-*, cuda-toolkit); triton, cuda-bindings are not."""
    name = line.split(";", 1)[0].strip().split("[", 1)[0]
    for sep in ("=", "<", ">", "~", "!", " "):
        name = name.split(sep, 1)[0]
    name = name.strip().lower().replace("_", "-")
    return name.startswith("nvidia-") or name == "cuda-toolkit"


def select(lock: Mapping[str, Any], requirements: Iterable[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """(the wheels to install, the requirement lines the lock does not hold)."""
    wanted = {w["name"] + "==" + w["version"] for w in lock.get("wheel", []) if w.get("part") == "compiler"}
    table: Mapping[str, list[str]] = lock.get("requirements", {})
    missing = []
    for line in (r.strip() for r in requirements):
        if not line or not is_toolkit_requirement(line):
            continue
        if line not in table:
            missing.append(line)
        else:
            wanted.update(table[line])
    by_pin = {w["name"] + "==" + w["version"]: w for w in lock.get("wheel", [])}
    unknown = sorted(pin for pin in wanted if pin not in by_pin)
    if unknown:
        raise LockError(f"the lock maps requirements to wheels it does not list: {', '.join(unknown)}")
    return [by_pin[pin] for pin in sorted(wanted)], missing


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(path: Path, expected: str, what: str) -> None:
    actual = sha256_of(path)
    if actual != expected:
        path.unlink(missing_ok=True)
        raise LockError(f"{what}: sha256 {actual} does not match the lock's {expected}; refusing it")


def fetch_archive(archive: Mapping[str, Any], base: str, dest: Path) -> Path:
    url = base.rstrip("/") + "/" + archive["path"]
    if not url.startswith(("https://", "file://")):
        raise LockError(f"refusing a download that is neither https nor file: {url}")
    out = dest / Path(archive["path"]).name
    print(f"install_cuda: {archive['component']} {archive['version']} <- {url}", flush=True)
    with urllib.request.urlopen(url, timeout=600) as response, out.open("wb") as handle:  # noqa: S310
        shutil.copyfileobj(response, handle, 1 << 20)
    verify(out, archive["sha256"], archive["path"])
    return out


def fetch_wheels(wheels: Sequence[Mapping[str, Any]], platform: str, dest: Path, python: str) -> list[Path]:
    """pip download in hash mode: pip refuses any file whose sha256 is not the lock's."""
    if not wheels:
        return []
    reqs = dest / "requirements.txt"
    reqs.write_text("".join(f"{w['name']}=={w['version']} --hash=sha256:{w['sha256']}\n" for w in wheels))
    argv = [python, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:"]
    argv += ["--require-hashes", "-r", str(reqs), "-d", str(dest)]
    if PLATFORMS.get(platform_module.machine().lower()) != platform:  # e.g. locking aarch64 on x86_64
        argv += ["--platform", f"manylinux_2_28_{platform}", "--python-version", "3.12", "--implementation", "py"]
    print("install_cuda: " + " ".join(argv), flush=True)
    subprocess.run(argv, check=True)
    files = []
    for wheel in wheels:
        path = dest / wheel["file"]
        if not path.is_file():
            raise LockError(f"pip did not fetch {wheel['file']} (a mirror serving another file?)")
        verify(path, wheel["sha256"], wheel["file"])
        files.append(path)
    return files


def _place(prefix: Path, relative: str) -> Path | None:
    """Where a file of an archive or wheel part goes (lib -> lib64); None: not part of a toolkit."""
    top, _, rest = relative.partition("/")
    if top not in MERGED or not rest:
        return None
    return prefix / ("lib64" if top == "lib" else top) / rest


def _safe(member: str) -> bool:
    parts = Path(member).parts
    return bool(parts) and not Path(member).is_absolute() and ".." not in parts


def unpack_archive(path: Path, prefix: Path) -> int:
    """A redist archive: <name>-archive/{bin,include,lib,...}; its top folder is dropped."""
    count = 0
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            if not _safe(member.name):
                raise LockError(f"{path.name}: unsafe member {member.name!r}")
            relative = member.name.partition("/")[2]
            target = _place(prefix, relative) if relative else None
            if target is None or member.isdir():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if member.issym():
                if os.path.isabs(member.linkname) or ".." in Path(member.linkname).parts:
                    raise LockError(f"{path.name}: unsafe link {member.name} -> {member.linkname}")
                target.unlink(missing_ok=True)
                target.symlink_to(member.linkname)
            elif member.isfile():
                source = tar.extractfile(member)
                if source is None:
                    continue
                with source, target.open("wb") as handle:
                    shutil.copyfileobj(source, handle, 1 << 20)
                target.chmod(0o755 if member.mode & 0o111 else 0o644)
            count += 1
    return count


def unpack_wheel(path: Path, prefix: Path) -> int:
    """An nvidia-* wheel: nvidia/<part>/{bin,include,lib,nvvm}/... (CUDA 13: nvidia/cu13/...)."""
    count = 0
    with zipfile.ZipFile(path) as wheel:
        for info in wheel.infolist():
            if not _safe(info.filename):
                raise LockError(f"{path.name}: unsafe member {info.filename!r}")
            parts = info.filename.split("/", 2)
            if len(parts) < 3 or parts[0] != "nvidia" or info.is_dir():
                continue
            target = _place(prefix, parts[2])
            if target is None:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with wheel.open(info) as source, target.open("wb") as handle:
                shutil.copyfileobj(source, handle, 1 << 20)
            target.chmod(0o755 if (info.external_attr >> 16) & 0o111 or parts[2].startswith("bin/") else 0o644)
            count += 1
    return count


def link_for_linker(lib64: Path) -> list[str]:
    """libX.so -> libX.so.N where a wheel ships only the versioned name (the linker wants -lX)."""
    made = []
    for path in sorted(lib64.glob("lib*.so.*")):
        stem = path.name.split(".so.", 1)[0] + ".so"
        link = lib64 / stem
        if not link.exists() and not link.is_symlink():
            link.symlink_to(path.name)
            made.append(stem)
    return made


def finish_layout(prefix: Path, platform: str) -> None:
    (prefix / "lib64").mkdir(parents=True, exist_ok=True)
    (prefix / "include").mkdir(parents=True, exist_ok=True)
    if not (prefix / "lib").exists():
        (prefix / "lib").symlink_to("lib64")
    link_for_linker(prefix / "lib64")
    stubs = prefix / "lib64" / "stubs"
    if stubs.is_dir():
        link_for_linker(stubs)
    targets = prefix / "targets" / TARGET_DIRS[platform]
    targets.mkdir(parents=True, exist_ok=True)
    for name, to in (("include", "../../include"), ("lib", "../../lib64")):
        if not (targets / name).exists():
            (targets / name).symlink_to(to)


@functools.cache  # one module: `except driver_stub().StubError` catches what its ensure() raised
def driver_stub() -> Any:  # loaded by path: host mode loads this file by path too, off sys.path
    spec = importlib.util.spec_from_file_location("wf_driver_stub", HERE / "driver_stub.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def install(
    cuda: str,
    platform: str,
    prefix: Path,
    requirements: Iterable[str] = (),
    locks: Path | None = None,
    python: str = sys.executable,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Install the toolkit into ``prefix`` (which must not exist); returns what wf-toolkit.json records."""
    environ = os.environ if environ is None else environ
    lock = load_lock(cuda, platform, locks)
    wheels, missing = select(lock, requirements)
    if missing:
        raise LockError(
            f"CUDA {cuda} ({platform}): the lock holds no wheels for {'; '.join(missing)}; "
            f"add them with `python3 tools/lock_cuda.py wheels {cuda} --platform {platform}`"
        )
    if prefix.exists():
        raise LockError(f"{prefix} exists; install into a new folder")
    base = environ.get("WF_CUDA_REDIST_URL") or lock.get("redist", {}).get("url", "")
    staging = Path(tempfile.mkdtemp(prefix=".cuda-", dir=prefix.parent))
    try:
        with tempfile.TemporaryDirectory(prefix="wf-cuda-dl-") as downloads:
            for archive in lock.get("archive", []):
                unpack_archive(fetch_archive(archive, base, Path(downloads)), staging)
            for path in fetch_wheels(wheels, platform, Path(downloads), python):
                unpack_wheel(path, staging)
        finish_layout(staging, platform)
        native = PLATFORMS.get(platform_module.machine().lower()) == platform  # the host's cc links for the host
        stub = driver_stub().ensure(staging) if native else None
        record = {
            "cuda": cuda,
            "platform": platform,
            "release": lock.get("release"),
            "lock_sha256": hashlib.sha256(lock_path(cuda, platform, locks).read_bytes()).hexdigest(),
            "archives": [f"{a['component']}=={a['version']}" for a in lock.get("archive", [])],
            "wheels": [f"{w['name']}=={w['version']}" for w in wheels],
            **({"driver_stub": stub} if stub else {}),
        }
        (staging / MARKER).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        staging.rename(prefix)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuda", required=True, help="the catalog's CUDA version, e.g. 12.4")
    parser.add_argument("--prefix", required=True, type=Path, help="the CUDA_HOME to create")
    parser.add_argument("--platform", default=PLATFORMS.get(platform_module.machine().lower(), "x86_64"))
    parser.add_argument("--requirements", type=Path, help="a file of requirement lines (a job's nvidia-* pins)")
    parser.add_argument("--locks", type=Path, help="the folder of cuda-<X.Y>-<platform>.toml (a stack's lock, checked)")
    args = parser.parse_args(argv)
    lines = args.requirements.read_text(encoding="utf-8").splitlines() if args.requirements else []
    try:
        record = install(args.cuda, args.platform, args.prefix, lines, args.locks)
    except (LockError, subprocess.CalledProcessError, OSError, driver_stub().StubError) as exc:
        print(f"install_cuda: {exc}", file=sys.stderr)
        return 1
    print(
        f"install_cuda: CUDA {record['cuda']} ({record['platform']}) in {args.prefix}: {len(record['wheels'])} wheels"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
