"""The user's side of `local demo` and `local run`: download, verify and install as someone without AWS.

Everything here reads the index over HTTP as a stranger would (the local edge of a public channel, or
the private proxy), checks each wheel against the sha256 its page lists and, given a keyring, against
its signed provenance (wheelfoundry_user.verify), and installs with no AWS credentials in pip's
environment.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

from wfbuild.envs import BASE_PTH
from wheelfoundry.publishing.provenance import SUFFIX
from wheelfoundry_user.trust import Keyring

Print = Callable[[str], None]
CREDENTIALS = re.compile(r"^(AWS_|WHEELFOUNDRY_ENDPOINT_URL$|BOTO_)")


@dataclass(frozen=True)
class Wheel:
    filename: str
    url: str
    sha256: str


def index_wheels(base: str, channel: str, project: str) -> list[Wheel]:
    page_url = f"{base}/simple/{channel}/{project}/"
    page = urllib.request.urlopen(page_url).read().decode()  # noqa: S310 - our own 127.0.0.1 edge or proxy
    found = []
    for href, name in re.findall(r'<a href="([^"]+)"[^>]*>([^<]+)</a>', page):
        link, _, fragment = href.replace("&amp;", "&").partition("#sha256=")
        found.append(Wheel(name, urljoin(page_url, link), fragment))
    return found


def copy_published(
    base: str, channel: str, project: str, dist: Path, out: Print, keys: Keyring | None = None
) -> list[Wheel]:
    """Download the project's wheels from the index into ``dist`` and list them: the sha256 the page
    lists checked, and with ``keys`` the signed provenance beside each (a wheel that fails is refused)."""
    from wheelfoundry_user.verify import check

    wheels = index_wheels(base, channel, project)
    dist.mkdir(parents=True, exist_ok=True)
    out("\nwheels published:")
    for wheel in wheels:
        data = urllib.request.urlopen(wheel.url).read()  # noqa: S310 - our own 127.0.0.1 edge or proxy
        if hashlib.sha256(data).hexdigest() != wheel.sha256:
            raise ValueError(f"{wheel.filename}: sha256 differs from the index")
        try:  # the signed provenance beside it (`wheelfoundry verify`)
            envelope = urllib.request.urlopen(wheel.url.split("#", 1)[0] + SUFFIX).read()  # noqa: S310
        except OSError:
            envelope = None
        if keys is not None:
            verdict = check(wheel.filename, data, envelope or b"{}", keys)
            if not verdict.ok:
                raise ValueError(f"{wheel.filename}: refused, {verdict.reason}")
        (dist / wheel.filename).write_bytes(data)
        checked = ", signed provenance verified" if keys is not None else ""
        out(f"  {wheel.filename}  {len(data) / 1024:.1f} KiB  sha256:{wheel.sha256}{checked}")
        if envelope is None:
            out(f"  {wheel.filename}: no signed provenance")
            continue
        (dist / (wheel.filename + SUFFIX)).write_bytes(envelope)
    return wheels


def user_env(cache: Path, torch_version: str, venv: Path, log: Path) -> Path:
    """A fresh venv with the user's torch, numpy, pytest and hypothesis: they live in a cached
    environment (built once, ~1 min; the demo builds it while the farm builds the wheel) that the venv
    sees through a .pth file (wfbuild.envs). pip's output goes to ``log``."""
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    argv = [sys.executable, "-m", "wfbuild.envs", "--python", python, "--dest", str(venv), "--torch"]
    argv += [f"torch=={torch_version}", "--pip", "numpy", "--pip", "pytest", "--pip", "hypothesis"]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as handle:
        done = subprocess.run(argv, env={**os.environ, "WF_CACHE_DIR": str(cache)}, stdout=handle, stderr=handle)
    if done.returncode != 0:
        raise RuntimeError(f"the user's environment could not be made: see {log}")
    return venv


def anonymous_env() -> dict[str, str]:
    """This environment without AWS credentials, profiles or endpoints: what a stranger's shell has."""
    return {k: v for k, v in os.environ.items() if not CREDENTIALS.match(k)}


def uv_binary() -> str:
    """The uv a user would run: the one beside this interpreter (.venv's, a dev dependency), else on PATH."""
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if os.access(beside, os.X_OK) else shutil.which("uv")
    if found is None:
        raise FileNotFoundError(f"no uv beside {sys.executable} or on PATH: pip install uv (the dev extra has it)")
    return found


def uv_env(uv: str, users: Path, dest: Path, log: Path) -> Path:
    """A fresh venv made by ``uv venv`` with the same torch, numpy, pytest and hypothesis as ``users`` (the
    cached environment, through the same .pth file). uv reads what is installed from the venv's own
    site-packages, not from sys.path as pip does, so the cached environment's ``*.dist-info`` folders (the
    metadata alone) are copied in: uv then sees the user's torch as installed and resolves the wheel against it,
    as it would in a venv where it had installed torch itself. uv's output goes to ``log``."""
    argv = [uv, "venv", "--no-config", "--no-cache", "--clear", "--python", str(users / "bin" / "python"), str(dest)]
    with log.open("w") as handle:
        done = subprocess.run(argv, env=uv_environment(), stdout=handle, stderr=handle, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"uv venv failed: see {log}")
    (theirs,) = users.glob("lib/python*/site-packages")
    (mine,) = dest.glob("lib/python*/site-packages")
    pth = theirs / BASE_PTH
    shutil.copy2(pth, mine / BASE_PTH)
    found = re.search(r"addsitedir\((\".*\")\)", pth.read_text())
    if found is None:
        raise RuntimeError(f"{pth}: not a cached environment's path file")
    for info in Path(json.loads(found[1])).glob("*.dist-info"):
        shutil.copytree(info, mine / info.name, dirs_exist_ok=True)
    return dest


def uv_environment() -> dict[str, str]:
    """anonymous_env without UV_* settings (with --no-config: no uv.toml either), never a Python download."""
    return {**{k: v for k, v in anonymous_env().items() if not k.startswith("UV_")}, "UV_PYTHON_DOWNLOADS": "never"}


def install_and_test(index: str, project: str, venv: Path, tests: Path, out: Print, uv: str | None = None) -> int:
    """A user's view: a fresh venv with their torch, the wheel from the index with no AWS credentials (with pip,
    or with ``uv`` given its binary), the extension's tests; the wheel under test is installed into the venv
    itself."""
    python = str(venv / "bin" / "python")
    if uv is None:
        installer = "pip"
        # --isolated: no pip.conf or PIP_* extra indexes, so the wheel can only come from our index.
        argv = [python, "-m", "pip", "install", "--isolated", "--quiet", "--disable-pip-version-check"]
        argv += ["--no-warn-script-location", "--index-url", index, project]
        shown = f"pip install --index-url {index} {project}"
        env = anonymous_env()
    else:
        installer = "uv"
        # --no-config and no UV_* variables: no uv.toml or extra index; --no-cache: nothing from an earlier run.
        # Not quiet: uv's summary shows what it installed (the wheel alone: the user's torch is there already).
        argv = [uv, "pip", "install", "--no-config", "--no-cache", "--python", python]
        argv += ["--index-url", index, project]
        shown = f"uv pip install --python {python} --index-url {index} {project}"
        env = uv_environment()
    out(f"\n{installer}: a fresh venv with the user's torch (from the cached environment): {venv}")
    out(f"{installer}: installing {project} with no AWS credentials (AWS_* unset): {shown}")
    subprocess.run(argv, check=True, env=env)
    where = subprocess.run(
        [python, "-c", f"import {project.replace('-', '_')} as m; print(m.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout.strip()
    out(f"{installer}: imported from {where}")
    out(f"{installer}: running the extension's tests: {tests}")
    # Own ini file, importlib mode and another working directory: the tests import the installed
    # wheel, never the source tree, and no configuration of this repository applies.
    ini = venv / "pytest.ini"
    ini.write_text("[pytest]\naddopts = -p no:cacheprovider --import-mode=importlib\n")
    result = subprocess.run(
        [python, "-m", "pytest", "-q", "-c", str(ini), "--rootdir", str(venv), str(tests)],
        cwd=venv,
        check=False,
        env=env,
    )
    verdict = "passed" if result.returncode == 0 else f"FAILED (pytest exit {result.returncode})"
    out(f"{installer}: installed through {index}, the extension's tests {verdict}")
    return result.returncode
