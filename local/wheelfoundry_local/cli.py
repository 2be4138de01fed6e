"""``wheelfoundry local ...``: the embedded AWS from the command line."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _quiet_handlers() -> None:
    # Set before any handler is imported: Powertools reads them when its objects are built.
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")


def _demo(args: argparse.Namespace) -> int:
    return _build(args, test=True)


def _run(args: argparse.Namespace) -> int:
    return _build(args, test=False)


def _build(args: argparse.Namespace, test: bool) -> int:
    """``local demo`` (test=True: also install from the index and run the source's tests) and ``local run``."""
    _quiet_handlers()
    from .demo import run_demo

    try:
        return run_demo(
            ROOT,
            Path(args.request),
            Path(args.source),
            Path(args.state_dir).resolve(),
            Path(args.dist).resolve(),
            timeout=args.timeout,
            test=test,
            debug=args.debug,
        )
    except ValueError as exc:
        print(f"wheelfoundry local {'demo' if test else 'run'}: {exc}")
        return 2


def _up(args: argparse.Namespace) -> int:
    _quiet_handlers()
    from .up import UpError, run_up

    try:
        return run_up(
            ROOT,
            Path(args.state_dir).resolve(),
            Path(args.request),
            None if args.no_source else Path(args.source),
            public_channels=args.public_channels,
        )
    except UpError as exc:
        print(f"wheelfoundry local up: {exc}")
        return 1


def _down(args: argparse.Namespace) -> int:
    from .up import UpError, run_down

    try:
        return run_down(Path(args.state_dir).resolve())
    except UpError as exc:
        print(f"wheelfoundry local down: {exc}")
        return 1


def add_local_commands(sub: Any) -> None:
    local = sub.add_parser("local", help="run WheelFoundry in the embedded AWS on this machine")
    local_sub = local.add_subparsers(dest="local_command", required=True)
    demo = local_sub.add_parser("demo", help="build, publish, install and test the example extension")
    demo.add_argument("--request", default=str(ROOT / "examples/requests/extension-demo.json"))
    demo.add_argument("--source", default=str(ROOT / "examples/extension"), help="the extension's source folder")
    demo.add_argument("--state-dir", default=".wf-local", help="instances' work roots, command logs, the test venv")
    demo.add_argument("--dist", default="dist", help="where the built wheels are copied")
    demo.add_argument("--timeout", type=float, default=1800)
    demo.add_argument("--debug", action="store_true", help="also print the raw error payloads of a failed run")
    demo.set_defaults(func=_demo)
    run = local_sub.add_parser(
        "run", help="build any extension through the embedded AWS and publish it (no tests run); wheels to ./dist"
    )
    run.add_argument("request", help="an extension request (JSON); its source is replaced by --source")
    run.add_argument("--source", required=True, help="the extension's source folder or an sdist .tar.gz")
    run.add_argument("--state-dir", default=".wf-local", help="instances' work roots and command logs")
    run.add_argument("--dist", default="dist", help="where the built wheels are copied")
    run.add_argument("--timeout", type=float, default=3600)
    run.add_argument("--debug", action="store_true", help="also print the raw error payloads of a failed run")
    run.set_defaults(func=_run)
    up = local_sub.add_parser(
        "up", help="deploy the stack into the embedded AWS and serve it on 127.0.0.1 until Ctrl-C or `local down`"
    )
    up.add_argument("--state-dir", default=".wf-local", help="instances' work roots, logs, up.json")
    up.add_argument(
        "--request",
        default=str(ROOT / "examples/requests/extension-demo.json"),
        help="a request whose source.s3 URI gets --source (default: the demo request)",
    )
    up.add_argument(
        "--source", default=str(ROOT / "examples/extension"), help="the source folder or sdist .tar.gz to upload there"
    )
    up.add_argument("--no-source", action="store_true", help="upload nothing")
    up.add_argument(
        "--public-channels",
        default="",
        help="the stack's PublicChannels (e.g. demo): served anonymously by the local edge, the distribution's rules",
    )
    up.set_defaults(func=_up)
    down = local_sub.add_parser("down", help="stop the `local up` of this state dir")
    down.add_argument("--state-dir", default=".wf-local")
    down.set_defaults(func=_down)
    from .watch import add_watch_command

    add_watch_command(local_sub)
