"""Write the CUDA toolkit locks, buildspecs/images/scripts/cuda/cuda-<X.Y>-<platform>.toml.

    python tools/lock_cuda.py check                                   # every catalog toolkit x platform locked?
    python tools/lock_cuda.py wheels 13.0 [--platform aarch64]        # the wheel part, from PyPI's sha256
    python tools/lock_cuda.py redist 12.4 --manifest FILE --pinned-by SRC [--pinned-by SRC] [--copy SRC]

`wheels` resolves every nvidia-* requirement the catalog pins for that toolkit (its own list and each
release's cuda_build list; ``cuda-toolkit[extras]==V`` through that metapackage's Requires-Dist) to one
file per platform, with the sha256 PyPI publishes for it (the simple API's JSON form), and, for CUDA 13,
the compiler as NVIDIA's ``cuda-toolkit`` metapackage of the catalog's toolkit release names it.
`redist` takes the compiler and core of CUDA 11/12 from NVIDIA's redistrib_<release>.json: the file
given must hash to the sha256 that public build code pins for it (``--sha256``; the sources go into the
lock), then each component archive's sha256 comes from that manifest. Every downloaded byte is pinned:
install_cuda.py refuses anything else. After a change: `make test` (tests/test_cuda_locks.py).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import sys
import tomllib
import urllib.request
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ROOT / "buildspecs/images/scripts/cuda"
sys.path.insert(0, str(ROOT / "functions"))
sys.path.insert(0, str(ROOT / "buildspecs/images/scripts"))

from install_cuda import is_toolkit_requirement  # type: ignore[import-not-found]  # noqa: E402

from wheelfoundry.catalog import Catalog, load_catalog  # noqa: E402

SIMPLE = "https://pypi.org/simple/{}/"
REDIST = "https://developer.download.nvidia.com/compute/cuda/redist/"
# The compiler and core of a CUDA 13 toolkit: the cuda-toolkit metapackage's extras (PyPI).
COMPILER_EXTRAS = ("nvcc", "nvvm", "crt", "cccl", "cudart", "culibos", "profiler", "nvml", "cupti", "nvtx", "nvrtc")
# The same from a CUDA 11/12 redist manifest (the libraries come from the nvidia-* wheels).
COMPILER_COMPONENTS = (
    "cuda_nvcc", "cuda_cudart", "cuda_cccl", "cuda_nvml_dev", "cuda_profiler_api", "cuda_nvrtc",
    "cuda_cupti", "cuda_nvtx", "libnvjitlink", "cuda_crt", "libnvvm",
)  # fmt: skip
REDIST_PLATFORMS = {"x86_64": "linux-x86_64", "aarch64": "linux-sbsa"}
MAX_GLIBC = (2, 28)  # the builder base (manylinux_2_28)
Fetch = Callable[[str, dict[str, str]], bytes]


def fetch(url: str, headers: dict[str, str]) -> bytes:
    if not url.startswith("https://"):
        raise ValueError(f"refusing a non-https URL: {url}")
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=120) as response:  # noqa: S310
        body: bytes = response.read()
    return body


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    file: str
    sha256: str
    url: str
    part: str = "library"

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


class PyPI:
    """PyPI's simple API (JSON form): each file's name, URL and published sha256; PEP 658 metadata."""

    def __init__(self, get: Fetch = fetch) -> None:
        self.get = get
        self._files: dict[str, list[dict[str, Any]]] = {}

    def files(self, name: str) -> list[dict[str, Any]]:
        key = canonicalize_name(name)
        if key not in self._files:
            body = self.get(SIMPLE.format(key), {"Accept": "application/vnd.pypi.simple.v1+json"})
            self._files[key] = json.loads(body)["files"]
        return self._files[key]

    def metadata(self, file: dict[str, Any]) -> str:
        """The file's METADATA: its PEP 658 copy where PyPI has one, else read from the wheel itself."""
        if file.get("core-metadata") or file.get("data-dist-info-metadata"):
            return self.get(file["url"] + ".metadata", {}).decode()
        body = self.get(file["url"], {})
        if hashlib.sha256(body).hexdigest() != file["hashes"]["sha256"]:
            raise ValueError(f"{file['filename']}: not the bytes PyPI lists")
        with zipfile.ZipFile(io.BytesIO(body)) as wheel:
            name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
            return wheel.read(name).decode()


def _glibc(platform_tag: str, arch: str) -> tuple[int, int] | None:
    legacy = {f"manylinux1_{arch}": (2, 5), f"manylinux2010_{arch}": (2, 12), f"manylinux2014_{arch}": (2, 17)}
    if platform_tag in legacy:
        return legacy[platform_tag]
    match = re.fullmatch(rf"manylinux_(\d+)_(\d+)_{arch}", platform_tag)
    return (int(match[1]), int(match[2])) if match else None


def pick_file(pypi: PyPI, name: str, spec: str, arch: str) -> Wheel | None:
    """The newest version matching ``spec`` with a manylinux (glibc <= 2.28) wheel for ``arch``."""
    requirement = Requirement(f"{name}{spec}")
    best: tuple[Version, tuple[int, int], dict[str, Any]] | None = None
    for file in pypi.files(name):
        if not file["filename"].endswith(".whl") or file.get("yanked"):
            continue
        _, version, _, tags = parse_wheel_filename(file["filename"])
        if not requirement.specifier.contains(version, prereleases=True):
            continue
        glibcs = [g for t in tags if (g := _glibc(t.platform, arch)) and g <= MAX_GLIBC]
        if glibcs and (best is None or (version, max(glibcs)) > best[:2]):
            best = (version, max(glibcs), file)
    if best is None:
        return None
    file = best[2]
    return Wheel(str(canonicalize_name(name)), str(best[0]), file["filename"], file["hashes"]["sha256"], file["url"])


def expand(pypi: PyPI, line: str, arch: str) -> tuple[list[Wheel], str | None]:
    """The wheels one requirement line stands for on ``arch`` (or why it cannot be locked)."""
    req = Requirement(line.split(";", 1)[0])
    if canonicalize_name(req.name) != "cuda-toolkit":
        wheel = pick_file(pypi, req.name, str(req.specifier), arch)
        return ([wheel], None) if wheel else ([], f"{line}: no manylinux {arch} wheel on PyPI")
    meta = pick_meta(pypi, str(req.specifier))
    wheels: list[Wheel] = []
    for dep in (Requirement(v) for k, v in _headers(meta) if k == "Requires-Dist"):
        extras = {e for e in req.extras if dep.marker and dep.marker.evaluate({"extra": e, "sys_platform": "linux"})}
        if not extras:
            continue
        wheel = pick_file(pypi, dep.name, str(dep.specifier), arch)
        if wheel is None:
            return [], f"{line}: {dep.name}{dep.specifier} has no manylinux {arch} wheel on PyPI"
        wheels.append(wheel)
    return wheels, None


def pick_meta(pypi: PyPI, spec: str) -> str:
    for file in pypi.files("cuda-toolkit"):
        if file["filename"].endswith(".whl") and Requirement(f"cuda-toolkit{spec}").specifier.contains(
            parse_wheel_filename(file["filename"])[1], prereleases=True
        ):
            return pypi.metadata(file)
    raise ValueError(f"no cuda-toolkit{spec} on PyPI")


def _headers(meta: str) -> Iterable[tuple[str, str]]:
    for line in meta.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(": ")
        yield key, value


def catalog_lines(catalog: Catalog, cuda: str) -> list[str]:
    """Every toolkit requirement the catalog pins for ``cuda``: the toolkit's own and each release's."""
    lines = list(catalog.cuda[cuda].requirements)
    for release in catalog.releases:
        build = release.cuda_build.get(cuda)
        if build and build.requirements:
            lines += build.requirements
    return sorted({line for line in lines if is_toolkit_requirement(line)})


def lock_wheels(
    catalog: Catalog, cuda: str, arch: str, pypi: PyPI
) -> tuple[list[Wheel], dict[str, list[str]], dict[str, str]]:
    """(wheels, requirement line -> pins, requirement line -> why unavailable on arch)."""
    wheels: dict[str, Wheel] = {}
    table, unavailable = {}, {}
    release = catalog.cuda[cuda].toolkit
    if Version(release).major >= 13:
        compiler, why = expand(pypi, f"cuda-toolkit[{','.join(COMPILER_EXTRAS)}]=={release}", arch)
        if why:
            raise ValueError(why)
        wheels |= {w.pin: Wheel(**{**w.__dict__, "part": "compiler"}) for w in compiler}
    for line in catalog_lines(catalog, cuda):
        found, why = expand(pypi, line, arch)
        if why:
            unavailable[line] = why
            continue
        table[line] = sorted({w.pin for w in found})
        for wheel in found:
            wheels.setdefault(wheel.pin, wheel)
    return sorted(wheels.values(), key=lambda w: w.pin), table, unavailable


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


def _q(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is a JSON string for these values


def render(lock: dict[str, Any]) -> str:
    out = [
        f"# CUDA {lock['cuda']} toolkit for {lock['platform']} (release {lock['release']}): every file with its",
        "# published sha256. Written by tools/lock_cuda.py; install_cuda.py installs it. Do not edit by hand.",
        f"schema = 1\ncuda = {_q(lock['cuda'])}\nplatform = {_q(lock['platform'])}\nrelease = {_q(lock['release'])}",
    ]
    if lock.get("redist"):
        r = lock["redist"]
        out.append(f"\n[redist]\nurl = {_q(r['url'])}\nmanifest = {_q(r['manifest'])}")
        out.append(f"manifest_sha256 = {_q(r['manifest_sha256'])}")
        out.append("pinned_by = [" + ", ".join(_q(s) for s in r["pinned_by"]) + "]")
        out.append(f"copy = {_q(r.get('copy', ''))}")
        if r.get("note"):
            out.append(f"note = {_q(r['note'])}")
    for a in lock.get("archive", []):
        out.append(f"\n[[archive]]\ncomponent = {_q(a['component'])}\nversion = {_q(a['version'])}")
        out.append(f"path = {_q(a['path'])}\nsha256 = {_q(a['sha256'])}\nsize = {a['size']}")
    for w in lock.get("wheel", []):
        out.append(f"\n[[wheel]]\nname = {_q(w['name'])}\nversion = {_q(w['version'])}\npart = {_q(w['part'])}")
        out.append(f"file = {_q(w['file'])}\nsha256 = {_q(w['sha256'])}\nurl = {_q(w['url'])}")
    out.append("\n[requirements]  # a catalog requirement line -> the locked wheels it stands for")
    out += [f"{_q(k)} = [{', '.join(_q(p) for p in v)}]" for k, v in sorted(lock.get("requirements", {}).items())]
    out.append("\n[unavailable]  # catalog lines with no wheel for this platform: refused at Validate")
    out += [f"{_q(k)} = {_q(v)}" for k, v in sorted(lock.get("unavailable", {}).items())]
    return "\n".join(out) + "\n"


def read(cuda: str, arch: str) -> dict[str, Any]:
    path = LOCKS / f"cuda-{cuda}-{arch}.toml"
    return tomllib.loads(path.read_text()) if path.exists() else {}


def write(lock: dict[str, Any]) -> Path:
    LOCKS.mkdir(parents=True, exist_ok=True)
    path = LOCKS / f"cuda-{lock['cuda']}-{lock['platform']}.toml"
    path.write_text(render(lock), encoding="utf-8")
    return path


def cmd_wheels(catalog: Catalog, cuda: str, arch: str, pypi: PyPI) -> Path:
    wheels, table, unavailable = lock_wheels(catalog, cuda, arch, pypi)
    lock = read(cuda, arch) or {"cuda": cuda, "platform": arch}
    lock |= {"release": catalog.cuda[cuda].toolkit, "requirements": table, "unavailable": unavailable}
    lock["wheel"] = [w.__dict__ for w in wheels]
    return write(lock)


def cmd_redist(
    catalog: Catalog, cuda: str, arch: str, manifest: Path, pin: str, pinned_by: list[str], copy: str, note: str = ""
) -> Path:
    body = manifest.read_bytes()
    actual = hashlib.sha256(body).hexdigest()
    if actual != pin:
        raise ValueError(f"{manifest}: sha256 {actual} is not the pinned {pin}: not NVIDIA's manifest")
    release, archives = redist_archives(body, arch, manifest.name)
    if release != catalog.cuda[cuda].toolkit:
        raise ValueError(
            f"{manifest.name} is CUDA {release}; the catalog builds {cuda} with {catalog.cuda[cuda].toolkit}"
        )
    lock = read(cuda, arch) or {"cuda": cuda, "platform": arch, "release": release}
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
    if args.command == "wheels":
        print(cmd_wheels(catalog, args.cuda, args.platform, PyPI()))
    else:
        a = args
        print(cmd_redist(catalog, a.cuda, a.platform, a.manifest, a.sha256, a.pinned_by, a.copy, a.note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
