"""Wheel versions, the way PyTorch's own builders set them.

- fixed: ``PYTORCH_BUILD_VERSION`` (torch) / ``BUILD_VERSION`` (domain libraries) = the job's
  build_version, e.g. ``2.5.1+cu124``;
- nightly: ``<version.txt up to its first 'a'>.dev<YYYYMMDD>+<variant>``, e.g.
  ``2.6.0.dev20241122+cpu`` (.circleci/scripts/binary_populate_env.sh does ``cut -da -f1``);
- git: unset, so setup.py derives ``<version.txt>+git<sha>`` itself.

``python -m wfbuild.wheels.versions nightly --version-file F --date D --variant V`` prints the nightly
version for the stage scripts, which only know version.txt after checkout.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from packaging.version import Version

from wfbuild.safety import DATE, LABEL, check


def nightly_version(version_txt: str, date: str, variant: str) -> str:
    check(DATE, date, "build date")
    check(LABEL, variant, "variant")
    base = version_txt.strip().split("a", 1)[0]
    version = Version(f"{base}.dev{date}+{variant}")  # raises InvalidVersion on a broken version.txt
    return str(version)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wfbuild.wheels.versions")
    sub = parser.add_subparsers(dest="command", required=True)
    nightly = sub.add_parser("nightly", help="print the nightly version from a version.txt")
    nightly.add_argument("--version-file", required=True, type=Path)
    nightly.add_argument("--date", required=True)
    nightly.add_argument("--variant", required=True)
    args = parser.parse_args(argv)
    print(nightly_version(args.version_file.read_text(encoding="utf-8"), args.date, args.variant))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
