"""Every CUDA toolkit the catalog offers has a complete lock for every platform it is built on.

The locks (buildspecs/images/scripts/cuda/) are what the builder images and host mode install from:
a missing or partial one would make a catalog target unbuildable, which is what this file forbids.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

import tools.lock_cuda as lock_cuda
from tests.helpers import ROOT
from wheelfoundry.catalog.catalog import load_catalog

CATALOG = load_catalog()
LOCKS = ROOT / "buildspecs" / "images" / "scripts" / "cuda"
SHA256 = re.compile(r"^[0-9a-f]{64}$")
NVIDIA_PLATFORM = {"x86_64": "linux-x86_64", "aarch64": "linux-sbsa"}
OFFERED = sorted((c, p) for c, t in CATALOG.cuda.items() if t.requirements for p in t.platforms)


def _lock(cuda: str, platform: str) -> dict[str, object]:
    return tomllib.loads((LOCKS / f"cuda-{cuda}-{platform}.toml").read_text(encoding="utf-8"))


def test_the_lock_tool_finds_nothing_missing() -> None:
    assert lock_cuda.problems(CATALOG) == []


def test_every_lock_file_belongs_to_a_catalog_toolkit() -> None:
    files = {p.stem.removeprefix("cuda-") for p in LOCKS.glob("cuda-*.toml")}
    assert files == {f"{c}-{p}" for c, p in OFFERED}


@pytest.mark.parametrize(("cuda", "platform"), OFFERED)
def test_a_lock_is_complete_and_every_file_is_pinned(cuda: str, platform: str) -> None:
    lock = _lock(cuda, platform)
    toolkit = CATALOG.cuda[cuda]
    assert (lock["cuda"], lock["platform"], lock["release"]) == (cuda, platform, toolkit.toolkit)
    wheels = lock.get("wheel", [])
    archives = lock.get("archive", [])
    assert isinstance(wheels, list) and isinstance(archives, list)
    for wheel in wheels:
        assert SHA256.match(wheel["sha256"]) and wheel["url"].startswith("https://files.pythonhosted.org/")
        name, version, _, tags = parse_wheel_filename(wheel["file"])
        assert (canonicalize_name(name), str(version)) == (wheel["name"], wheel["version"])
        assert any(t.platform.endswith(f"_{platform}") for t in tags), wheel["file"]
    if Version(toolkit.toolkit).major >= 13:
        compiler = {w["name"] for w in wheels if w["part"] == "compiler"}
        assert {"nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-cccl"} <= compiler
    else:
        redist = lock["redist"]
        assert isinstance(redist, dict) and SHA256.match(redist["manifest_sha256"]) and redist["pinned_by"]
        assert redist["manifest"] == f"redistrib_{toolkit.toolkit}.json"
        components = {a["component"] for a in archives}
        assert {"cuda_nvcc", "cuda_cudart", "cuda_cccl"} <= components
        for archive in archives:
            assert SHA256.match(archive["sha256"]) and f"/{NVIDIA_PLATFORM[platform]}/" in archive["path"]
    # every nvidia-* line the catalog pins for this toolkit is either served or refused with a reason
    table, unavailable = lock.get("requirements", {}), lock.get("unavailable", {})
    assert isinstance(table, dict) and isinstance(unavailable, dict)
    locked = {f"{w['name']}=={w['version']}" for w in wheels}
    assert all(set(pins) <= locked for pins in table.values())
    assert set(lock_cuda.catalog_lines(CATALOG, cuda)) <= set(table) | set(unavailable)


def test_aarch64_cuda_targets_have_an_aarch64_lock() -> None:
    offered = {c for r in CATALOG.releases for c in r.aarch64_cuda}
    offered |= {c for m in CATALOG.moving.values() for c in m.aarch64_cuda}
    assert offered, "the catalog offers no aarch64 CUDA build"
    assert all("aarch64" in CATALOG.cuda[c].platforms for c in offered), offered


def test_gcc_limits_are_known_for_every_offered_toolkit() -> None:
    assert all(CATALOG.cuda[c].gcc_max >= 11 for c, _ in OFFERED)


def test_the_lock_tool_refuses_a_manifest_that_is_not_the_pinned_one(tmp_path: Path) -> None:
    manifest = tmp_path / "redistrib_12.4.1.json"
    manifest.write_text('{"release_label": "12.4.1"}')
    with pytest.raises(ValueError, match="not NVIDIA's manifest"):
        lock_cuda.cmd_redist(CATALOG, "12.4", "x86_64", manifest, "0" * 64, ["x@y:z"], "")
