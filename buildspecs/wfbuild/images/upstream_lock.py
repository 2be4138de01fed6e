"""What a runtime image needs beyond the private index: the index wheels' own dependencies (an
extension's torch, torch's filelock/sympy/nvidia-*, ...) and the request's ``image.pip`` pins.

pip resolves them once against ONE upstream index (``--index-url``, never an extra index: no
dependency confusion with the private one) for the image's Python and platform, with the index wheels
themselves as local files, and reports every distribution with its sha256 (``--dry-run --report``).
Those sha256s are trusted on first use: they go into the image's lock next to the index's, the files
are downloaded into the build context with ``pip download --require-hashes``, and the image build
then reads no index at all. The resolution is recorded in result.json (``upstream``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from wfbuild.images.runtime_image import ImageJobFailed, Locked


def _platform_args(image: Mapping[str, Any]) -> list[str]:
    arch = image["platform"]
    tags = [f"manylinux_2_{minor}_{arch}" for minor in (28, 27, 26, 17)] + [f"manylinux2014_{arch}", "any"]
    return [*(a for tag in tags for a in ("--platform", tag)), "--python-version", image["python"]]


def _source_args(index_url: str | None, find_links: str | None) -> list[str]:
    if find_links:
        return ["--no-index", "--find-links", find_links]
    return ["--index-url", index_url] if index_url else []


def resolve(
    image: Mapping[str, Any], wheels: Path, locked: list[Locked], work: Path, index_url: str | None,
    find_links: str | None = None,
) -> list[Locked]:  # fmt: skip
    """Every distribution the locked wheels and ``image["pip"]`` pull in, pinned with its sha256."""
    requirements = [str(wheels / item.filename) for item in locked] + list(image.get("pip") or [])
    report = work / "upstream-report.json"
    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--only-binary=:all:",
            "--target", str(work / "resolve-target"), "--report", str(report), "--quiet", "--disable-pip-version-check",
            *_platform_args(image), *_source_args(index_url, find_links), *requirements]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ImageJobFailed(f"resolving the image's dependencies failed: {(proc.stdout + proc.stderr)[-2000:]}")
    ours = {item.project for item in locked}
    upstream = []
    for entry in json.loads(report.read_text())["install"]:
        name = canonicalize_name(entry["metadata"]["name"])
        if name in ours:
            continue
        info: dict[str, Any] = entry["download_info"]
        sha = info.get("archive_info", {}).get("hashes", {}).get("sha256")
        if not sha:
            raise ImageJobFailed(f"{name}: the upstream index gave no sha256")
        filename = info["url"].rsplit("/", 1)[-1].split("#", 1)[0]
        upstream.append(Locked(name, entry["metadata"]["version"], filename, sha, "upstream"))
    return sorted(upstream, key=lambda item: item.project)  # the lock's order does not follow pip's


def download(
    image: Mapping[str, Any], upstream: list[Locked], wheels: Path, work: Path, index_url: str | None,
    find_links: str | None = None,
) -> None:  # fmt: skip
    """The upstream files into the build context, each checked against its sha256 by pip."""
    if not upstream:
        return
    pins = work / "upstream.txt"
    pins.write_text("".join(f"{item.line}\n" for item in upstream), encoding="utf-8")
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
            "--quiet", "--disable-pip-version-check", "--dest", str(wheels), *_platform_args(image),
            *_source_args(index_url, find_links), "-r", str(pins)]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ImageJobFailed(f"downloading the image's dependencies failed: {(proc.stdout + proc.stderr)[-2000:]}")
