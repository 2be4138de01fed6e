"""What this bundle can build images from: the bases and downloads it pins, in one summary.

An image is built only from a base pinned in ``images/base-images.lock``, from downloads pinned in
``images/scripts/checksums.sha256`` and from CUDA toolkit locks in ``images/scripts/cuda/`` (docs/security.md
section 5); anything else is refused on the
build host, after an instance was paid for. The bundle publisher writes this summary into
``bundles/current.json`` so that Validate (``wheelfoundry.request.pins``) refuses such a request before
anything is launched, from the same files the build host would check.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

# build argument -> the file name its install script passes to fetch_verified.sh ({value}: the
# argument as given, {bare}: without a leading "v", {arch}: the recipe's machine). tests/test_pins.py
# learns each script's real name (pin_downloads.learn) to keep these names the scripts'.
ARCHIVES: dict[str, str] = {
    "ACL_VERSION": "ComputeLibrary-{bare}.tar.gz",  # install_acl.sh
    "OPENBLAS_VERSION": "OpenBLAS-{bare}.tar.gz",  # install_openblas.sh
    "OPENMPI_VERSION": "openmpi-{value}.tar.bz2",  # install_openmpi.sh
}


def image_tool(images: Path, name: str) -> ModuleType:
    """One of the bundle's own image tools (``bump_base_images``, ``pin_downloads``): the one parser
    of base-images.lock and of checksums.sha256 respectively."""
    spec = importlib.util.spec_from_file_location(f"wf_{name}", images / f"{name}.py")
    if spec is None or spec.loader is None:
        raise RuntimeError(f"no {name}.py in {images}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bump_module(images: Path) -> ModuleType:
    return image_tool(images, "bump_base_images")


def cuda_locks(images: Path, only: set[str] | None = None) -> dict[str, dict[str, Any]]:
    """``{"12.8-aarch64": {"compiler": True, "requirements": [...], "unavailable": {line: why}}}``: the locks
    (scripts/cuda/, what install_cuda.py installs) and the requirement lines each can serve."""
    import tomllib  # the bundle publisher's Python 3.12 (an EC2 host's runner never calls this)

    found = {}
    for path in sorted((images / "scripts" / "cuda").glob("cuda-*.toml")):
        if only is not None and path.stem.removeprefix("cuda-") not in only:
            found[path.stem.removeprefix("cuda-")] = {"compiler": True, "requirements": [], "unavailable": {}}
            continue  # a caller checking a few jobs (`plan`) reads only their locks; the rest just exist
        lock = tomllib.loads(path.read_text(encoding="utf-8"))
        compiler = bool(lock.get("archive")) or any(w.get("part") == "compiler" for w in lock.get("wheel", []))
        found[f"{lock['cuda']}-{lock['platform']}"] = {
            "compiler": compiler,
            "requirements": sorted(lock.get("requirements", {})),
            "unavailable": dict(lock.get("unavailable", {})),
        }
    return found


def summary(images: Path, cuda: set[str] | None = None) -> dict[str, Any]:
    """``{"bases": [...], "archives": [...], "archive_names": ARCHIVES, "cuda": {...}}`` for
    bundles/current.json (``cuda``: read only these "<version>-<platform>" locks in full)."""
    bases = sorted(bump_module(images).load(images / "base-images.lock"))
    archives = sorted(image_tool(images, "pin_downloads").pinned(images / "scripts" / "checksums.sha256"))
    return {"bases": bases, "archives": archives, "archive_names": ARCHIVES, "cuda": cuda_locks(images, cuda)}


def of_this_checkout(cuda: set[str] | None = None) -> dict[str, Any] | None:
    """The summary of the bundle this package sits in (``buildspecs/images`` beside ``buildspecs/wfbuild``), as
    its publisher would record it; None where the package was installed without its bundle. The command line's
    `plan` and `local watch --dry-run` both read it here, so neither imports the other for it."""
    images = Path(__file__).resolve().parents[2] / "images"
    return summary(images, cuda) if (images / "base-images.lock").is_file() else None
