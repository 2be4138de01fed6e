"""Build one wheel from a source tree with the PEP 517 backend it declares, the hook run by the build
environment's Python (pypa/build, without isolation: the environment's torch is the one to build against).

    python3 -m wfbuild.wheel_build --python ENV/bin/python --src DIR --out DIR [--config-setting KEY=VALUE]...

Why not ``pip wheel``: pip asks the backend for the metadata before it asks for the wheel, and with
setuptools each hook runs setup.py, so a torch extension's setup.py imported torch twice for one wheel
(3-5 s of CPU per build on a slow core). pypa/build calls ``build_wheel`` alone. The source needs no build
requirements checked here: the build environment is made for it (wfbuild.envs), as pip's
``--no-build-isolation --no-deps`` assumed before.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from build import BuildBackendException, BuildException, ProjectBuilder


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m wfbuild.wheel_build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="the build environment's interpreter")
    parser.add_argument("--src", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path, help="the wheel is written here")
    parser.add_argument("--config-setting", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    try:
        wheel = build_wheel(args.python, args.src, args.out, config_settings(args.config_setting))
    except ValueError as exc:
        parser.error(str(exc))
    except (BuildException, BuildBackendException) as exc:
        # The backend's own output (the compiler's errors) is already in the log above this line.
        print(f"error: the build backend failed for {args.src}: {exc}", file=sys.stderr)
        return 1
    print(f"built {wheel.name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
