"""What this bundle can build images from: the bases and downloads it pins, in one summary.

An image is built only from a base pinned in ``images/base-images.lock`` and from downloads pinned in
``images/scripts/checksums.sha256`` (docs/security.md section 5); anything else is refused on the
build host, after an instance was paid for. The bundle publisher writes this summary into
``bundles/current.json`` so that Validate (``wheelfoundry.pins``) refuses such a request before
anything is launched, from the same files the build host would check.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

# build argument -> the file name its install script passes to fetch_verified.sh ({value}: the
# argument as given, {bare}: without a leading "v", {arch}: the recipe's machine). tests/buildspecs
# runs each install script against a recording fetch_verified.sh to keep these names the scripts'.
ARCHIVES: dict[str, str] = {
    "ACL_VERSION": "ComputeLibrary-{bare}.tar.gz",  # install_acl.sh
    "OPENBLAS_VERSION": "OpenBLAS-{bare}.tar.gz",  # install_openblas.sh
    "OPENMPI_VERSION": "openmpi-{value}.tar.bz2",  # install_openmpi.sh
    "SCCACHE_VERSION": "sccache-{value}-{arch}-unknown-linux-musl.tar.gz",  # install_sccache.sh
}
NOT_DOWNLOADED = "none"  # e.g. ACL_VERSION=none: that script installs nothing


def bump_module(images: Path) -> ModuleType:
    """The bundle's own ``bump_base_images.py`` (the one parser of base-images.lock)."""
    spec = importlib.util.spec_from_file_location("wf_bump_base_images", images / "bump_base_images.py")
    if spec is None or spec.loader is None:
        raise RuntimeError(f"no bump_base_images.py in {images}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pinned_archives(checksums: Path) -> list[str]:
    """File names with a sha256 in ``checksums.sha256`` (what fetch_verified.sh accepts)."""
    names = []
    for line in checksums.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if len(fields) == 2 and not fields[0].startswith("#"):
            names.append(fields[1])
    return sorted(names)


def summary(images: Path) -> dict[str, Any]:
    """``{"bases": [...], "archives": [...], "archive_names": ARCHIVES}`` for bundles/current.json."""
    bases = sorted(bump_module(images).load(images / "base-images.lock"))
    archives = pinned_archives(images / "scripts" / "checksums.sha256")
    return {"bases": bases, "archives": archives, "archive_names": ARCHIVES}
