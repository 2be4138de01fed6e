"""Build one wheel from a source tree with the PEP 517 backend it declares, the hook run by the build
environment's Python (pypa/build, without isolation: the environment's torch is the one to build against).

    python3 -m wfbuild.wheels.wheel_build --python ENV/bin/python --src DIR --out DIR [--config-setting KEY=VALUE]...

Why not ``pip wheel``: pip asks the backend for the metadata before it asks for the wheel, and with
setuptools each hook runs setup.py, so a torch extension's setup.py imported torch twice for one wheel
(3-5 s of CPU per build on a slow core). pypa/build calls ``build_wheel`` alone. The source needs no build
requirements checked here: the build environment is made for it (wfbuild.envs), as pip's
``--no-build-isolation --no-deps`` assumed before.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from build import BuildBackendException, BuildException, ProjectBuilder
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from wfbuild.wheels import wheelfile


def config_settings(pairs: list[str]) -> dict[str, str | list[str]]:
    """``KEY=VALUE`` pairs as PEP 517 config settings; a key given twice keeps every value, as pip does."""
    settings: dict[str, str | list[str]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--config-setting {pair!r}: expected KEY=VALUE")
        old = settings.get(key)
        settings[key] = value if old is None else [*(old if isinstance(old, list) else [old]), value]
    return settings


def build_wheel(python: str, src: Path, out: Path, settings: dict[str, str | list[str]]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    builder = ProjectBuilder(src, python_executable=python)
    return Path(builder.build("wheel", out, config_settings=settings or None))


def python_refused(wheel: Path, python: str) -> str | None:
    """Why the wheel's Requires-Python refuses the environment's Python, or None. pip wheel read it from the
    metadata hook before building; with build_wheel alone it is read from the wheel."""
    requires = wheelfile.metadata(wheel).get("Requires-Python")
    if not requires:
        return None
    probe = "import platform; print(platform.python_version())"
    version = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    try:
        allowed = SpecifierSet(requires)
    except InvalidSpecifier:
        return f"its Requires-Python {requires!r} is not a version specifier"
    return None if allowed.contains(version, prereleases=True) else f"it requires Python {requires}, not {version}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m wfbuild.wheels.wheel_build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="the build environment's interpreter")
    parser.add_argument("--src", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path, help="the wheel is written here")
    parser.add_argument("--config-setting", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    try:
        settings = config_settings(args.config_setting)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        wheel = build_wheel(args.python, args.src, args.out, settings)
    except (BuildException, BuildBackendException, ValueError, OSError) as exc:
        # The backend's own output (the compiler's errors) is already in the log above this line. ValueError:
        # pyproject.toml's backend-path outside the source tree.
        print(f"error: the build backend failed for {args.src}: {exc}", file=sys.stderr)
        return 1
    refused = python_refused(wheel, args.python)
    if refused:
        wheel.unlink()
        print(f"error: {wheel.name} cannot be installed by the cell's Python: {refused}", file=sys.stderr)
        return 1
    print(f"built {wheel.name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
