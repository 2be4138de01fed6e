"""Write the CUDA toolkit locks, buildspecs/images/scripts/cuda/cuda-<X.Y>-<platform>.toml.

    python tools/lock_cuda.py check                                   # every catalog toolkit x platform locked?
    python tools/lock_cuda.py wheels 13.0 [--platform aarch64]        # the wheel part, from PyPI's sha256
    python tools/lock_cuda.py wheels 13.2 [--torch 2.15.0] [--requirement LINE]  # a CUDA the catalog lacks
    python tools/lock_cuda.py redist 12.4 --manifest FILE --pinned-by SRC [--pinned-by SRC] [--copy SRC]

`wheels` resolves (wheelfoundry.toolkits.toolkit_lock, which the watcher shares) every nvidia-* requirement the
catalog pins for that toolkit (its own list and each release's cuda_build list; ``cuda-toolkit[extras]==V``
through that metapackage's Requires-Dist), the lines given (``--torch``: what PyPI's torch wheel of that
version pins), to one file per platform with the sha256 PyPI publishes for it (the simple API's JSON form),
and, for CUDA 13+, the compiler as NVIDIA's ``cuda-toolkit`` metapackage of the toolkit release names it.
The release is the catalog's ``toolkit``; where the catalog has none (a CUDA newer than it), the one the
lines pin, else PyPI's newest X.Y.*; with no line at all, the metapackage's library extras are locked.
`redist` takes the compiler and core of CUDA 11/12 from NVIDIA's redistrib_<release>.json: the file
given must hash to the sha256 that public build code pins for it (``--sha256``; the sources go into the
lock), then each component archive's sha256 comes from that manifest. Every downloaded byte is pinned:
install_cuda.py refuses anything else. After a change: `make test` (tests/test_cuda_locks.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tomllib
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ROOT / "buildspecs/images/scripts/cuda"
sys.path.insert(0, str(ROOT / "functions"))
sys.path.insert(0, str(ROOT / "buildspecs/images/scripts"))

from install_cuda import is_toolkit_requirement  # type: ignore[import-not-found]  # noqa: E402

from wheelfoundry.catalog.catalog import Catalog, load_catalog  # noqa: E402
from wheelfoundry.toolkits import toolkit_lock  # noqa: E402
from wheelfoundry.toolkits.toolkit_lock import SimpleIndex, ToolkitLockError  # noqa: E402
from wheelfoundry.toolkits.toolkit_lock_file import render  # noqa: E402  (the watcher writes the stack's locks with it)

REDIST = "https://developer.download.nvidia.com/compute/cuda/redist/"
# The compiler and core of a CUDA 11/12 redist manifest (the libraries come from the nvidia-* wheels).
COMPILER_COMPONENTS = (
    "cuda_nvcc", "cuda_cudart", "cuda_cccl", "cuda_nvml_dev", "cuda_profiler_api", "cuda_nvrtc",
    "cuda_cupti", "cuda_nvtx", "libnvjitlink", "cuda_crt", "libnvvm",
)  # fmt: skip
REDIST_PLATFORMS = {"x86_64": "linux-x86_64", "aarch64": "linux-sbsa"}


def fetch(url: str, headers: Mapping[str, str]) -> bytes:
    if not url.startswith("https://"):
        raise ValueError(f"refusing a non-https URL: {url}")
    request = urllib.request.Request(url, headers=dict(headers))  # noqa: S310  (https only, checked above)
    with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310
        body: bytes = response.read()
    return body


def catalog_lines(catalog: Catalog, cuda: str) -> list[str]:
    """Every toolkit requirement the catalog pins for ``cuda``: the toolkit's own and each release's."""
    toolkit = catalog.cuda.get(cuda)
    lines = list(toolkit.requirements) if toolkit else []
    for release in catalog.releases:
        build = release.cuda_build.get(cuda)
        if build and build.requirements:
            lines += build.requirements
    return sorted({line for line in lines if is_toolkit_requirement(line)})


def torch_requirement_lines(index: SimpleIndex, versions: list[str], cuda: str, arch: str) -> list[str]:
    """The toolkit lines PyPI's torch ``versions`` pin (each must be a CUDA ``cuda`` build for Linux ``arch``)."""
    lines: list[str] = []
    for version in versions:
        files = [
            f for f in index.files("torch")
            if f["filename"].startswith(f"torch-{version}-") and f["filename"].endswith(f"_{arch}.whl")
        ]  # fmt: skip
        if not files:
            raise ToolkitLockError(f"--torch: {version} has no Linux {arch} wheel on PyPI")
        found = toolkit_lock.torch_lines(index.metadata(files[-1]), cuda)
        if not found:
            raise ToolkitLockError(f"--torch: PyPI's torch {version} for {arch} is not a CUDA {cuda} build")
        lines += found
    return lines


def lock_wheels(
    catalog: Catalog, cuda: str, arch: str, pypi: SimpleIndex, extra: list[str] | None = None
) -> toolkit_lock.Resolution:
    """Resolve ``cuda`` for ``arch``: the catalog's release and lines where it has them, else PyPI's newest
    release of that CUDA and its library extras (plus ``extra`` lines, e.g. a torch wheel's pins)."""
    toolkit = catalog.cuda.get(cuda)
    release = toolkit.toolkit if toolkit and toolkit.toolkit else None
    return toolkit_lock.resolve(pypi, cuda, arch, [*catalog_lines(catalog, cuda), *(extra or [])], release)


def redist_archives(manifest: bytes, arch: str, name: str) -> tuple[str, list[dict[str, Any]]]:
    """(release, the compiler components' archives for ``arch``) from a redistrib_<release>.json.

    Manifests before 12.2 carry no ``release_label``: their release is their file name's.
    """
    data = json.loads(manifest)
    platform = REDIST_PLATFORMS[arch]
    archives = []
    for component in COMPILER_COMPONENTS:
        entry = data.get(component, {}).get(platform)
        if entry is None:
            continue
        archives.append(
            {"component": component, "version": data[component]["version"], "path": entry["relative_path"],
             "sha256": entry["sha256"], "size": int(entry.get("size", 0))}
        )  # fmt: skip
    return data.get("release_label") or name.removeprefix("redistrib_").removesuffix(".json"), archives


def read(cuda: str, arch: str) -> dict[str, Any]:
    path = LOCKS / f"cuda-{cuda}-{arch}.toml"
    return tomllib.loads(path.read_text()) if path.exists() else {}


def write(lock: dict[str, Any]) -> Path:
    LOCKS.mkdir(parents=True, exist_ok=True)
    path = LOCKS / f"cuda-{lock['cuda']}-{lock['platform']}.toml"
    path.write_text(render(lock), encoding="utf-8")
    return path


def cmd_wheels(catalog: Catalog, cuda: str, arch: str, pypi: SimpleIndex, extra: list[str] | None = None) -> Path:
    found = lock_wheels(catalog, cuda, arch, pypi, extra)
    lock = read(cuda, arch) or {"cuda": cuda, "platform": arch}
    if lock.get("archive") and lock.get("release") != found.release:
        raise ToolkitLockError(f"release: {found.release}, but the lock's redist archives are {lock['release']}")
    table = {k: list(v) for k, v in found.requirements.items()}
    lock |= {"release": found.release, "requirements": table, "unavailable": dict(found.unavailable)}
    lock["wheel"] = [w.__dict__ for w in found.wheels]
    return write(lock)


def cmd_redist(
    catalog: Catalog, cuda: str, arch: str, manifest: Path, pin: str, pinned_by: list[str], copy: str, note: str = ""
) -> Path:
    body = manifest.read_bytes()
    actual = hashlib.sha256(body).hexdigest()
    if actual != pin:
        raise ToolkitLockError(f"{manifest}: sha256 {actual} is not the pinned {pin}: not NVIDIA's manifest")
    release, archives = redist_archives(body, arch, manifest.name)
    lock = read(cuda, arch) or {"cuda": cuda, "platform": arch, "release": release}
    # The catalog's toolkit release where it names one, else the one `wheels` locked, else any CUDA ``cuda``.
    toolkit = catalog.cuda.get(cuda)
    expected = (toolkit.toolkit if toolkit else "") or lock.get("release", "")
    if release != expected if expected else not release.startswith(f"{cuda}."):
        raise ToolkitLockError(
            f"{manifest.name} is CUDA {release}; CUDA {cuda} is locked with {expected or cuda + '.x'}"
        )
    lock["redist"] = {
        "url": REDIST,
        "manifest": manifest.name,
        "manifest_sha256": pin,
        "pinned_by": pinned_by,
        "copy": copy,
        **({"note": note} if note else {}),
    }
    lock["archive"] = archives
    return write(lock)


def problems(catalog: Catalog) -> list[str]:
    """What tests/test_cuda_locks.py asserts: each catalog toolkit has a complete lock per platform."""
    found = []
    for cuda, toolkit in sorted(catalog.cuda.items()):
        if not toolkit.requirements:
            continue  # refused by the catalog itself (no slim wheel possible)
        for arch in toolkit.platforms:
            lock = read(cuda, arch)
            if not lock:
                found.append(f"CUDA {cuda} {arch}: no lock (tools/lock_cuda.py wheels {cuda} --platform {arch})")
                continue
            if Version(toolkit.toolkit).major < 13 and not lock.get("archive"):
                found.append(f"CUDA {cuda} {arch}: no compiler (tools/lock_cuda.py redist {cuda} ...)")
            if Version(toolkit.toolkit).major >= 13 and not any(w["part"] == "compiler" for w in lock.get("wheel", [])):
                found.append(f"CUDA {cuda} {arch}: no compiler wheels")
            held = set(lock.get("requirements", {})) | set(lock.get("unavailable", {}))
            found += [
                f"CUDA {cuda} {arch}: {line} not locked" for line in catalog_lines(catalog, cuda) if line not in held
            ]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check")
    wheels = sub.add_parser("wheels")
    wheels.add_argument("cuda")
    wheels.add_argument("--platform", default="x86_64", choices=sorted(REDIST_PLATFORMS))
    wheels.add_argument("--torch", action="append", default=[], help="also lock what PyPI's torch VERSION pins")
    wheels.add_argument("--requirement", action="append", default=[], help="also lock this requirement line")
    redist = sub.add_parser("redist")
    redist.add_argument("cuda")
    redist.add_argument("--platform", default="x86_64", choices=sorted(REDIST_PLATFORMS))
    redist.add_argument("--manifest", type=Path, required=True)
    redist.add_argument("--sha256", required=True, help="the manifest's sha256 as public build code pins it")
    redist.add_argument("--pinned-by", action="append", required=True, help="repository@commit:path pinning it")
    redist.add_argument("--copy", default="", help="where this copy of the manifest came from")
    redist.add_argument("--note", default="", help="why the pin is trusted where no build code pins it")
    args = parser.parse_args(argv)
    catalog = load_catalog()
    if args.command == "check":
        found = problems(catalog)
        print("\n".join(found) or "every catalog CUDA toolkit is locked for every platform it offers")
        return 1 if found else 0
    try:
        if args.command == "wheels":
            pypi = SimpleIndex(fetch)
            extra = [*args.requirement, *torch_requirement_lines(pypi, args.torch, args.cuda, args.platform)]
            print(cmd_wheels(catalog, args.cuda, args.platform, pypi, extra))
        else:
            a = args
            print(cmd_redist(catalog, a.cuda, a.platform, a.manifest, a.sha256, a.pinned_by, a.copy, a.note))
    except (ToolkitLockError, urllib.error.URLError) as exc:
        print(f"lock_cuda: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
