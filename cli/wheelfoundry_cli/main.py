"""The ``wheelfoundry`` command: plan requests, and run the embedded AWS locally.

Exit codes: 0 done, 1 the run failed, 2 the input was invalid (every problem is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wheelfoundry.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.errors import Issue, RequestInvalid
from wheelfoundry.jobs import Plan
from wheelfoundry.pins import unbuildable
from wheelfoundry.planning import plan_request
from wheelfoundry.request import parse_request
from wheelfoundry.usage import RecordedUsage, from_manifest
from wheelfoundry_cli.catalog_commands import add_catalog_commands
from wheelfoundry_cli.render import render_dry_run, render_plan
from wheelfoundry_cli.request_flags import add_builder_flags, build_raw_request


def _plan_command(args: argparse.Namespace) -> int:
    raw = build_raw_request(args, os.environ)
    catalog, config = load_catalog(), load_config()
    usage = recorded_usage(args.usage)
    plan: Plan = plan_request(parse_request(raw, catalog, config), catalog, config, usage=usage)
    if args.json:
        images = {"images": [image.to_dict() for image in plan.images]}  # runtime image contracts (issue 11)
        print(json.dumps({**plan.summary(), "jobs": [job.to_dict() for job in plan.jobs], **images}, indent=2))
    elif args.dry_run:
        print(render_dry_run(plan, explain=args.explain))
    else:
        print(render_plan(plan, explain=args.explain))
    toolkits = {f"{j.image.build_args['CUDA_VERSION']}-{j.platform}" for j in plan.jobs if j.cuda}
    if not args.json and (issues := unbuildable(plan.jobs, plan.images, checkout_pins(toolkits))):
        print(f"\nnote: a stack deployed from this checkout would refuse {len(issues)} image(s) (docs/security.md §5):")
        print("\n".join(f"  - {issue}" for issue in issues))
    return 0


def recorded_usage(paths: Sequence[str]) -> dict[str, RecordedUsage]:
    """--usage: earlier jobs' manifest.json files; each one's compile record, keyed by source and target."""
    found = {}
    for path in paths:
        try:
            record = from_manifest(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RequestInvalid(
                [Issue("--usage", f"{path}: not a job's manifest.json ({exc})", path, ("a manifest.json",))]
            ) from exc
        if record is None:
            raise RequestInvalid(
                [Issue("--usage", f"{path}: records no compile usage", path, ("a manifest with compile_usage",))]
            )
        found[record.source] = record
    return found


def checkout_pins(cuda: set[str] | None = None) -> dict[str, Any] | None:
    """What this checkout's build bundle can build images from (as its publisher would record; ``cuda``:
    the toolkit locks to read in full); None where there is no checkout beside the package."""
    images = Path(__file__).resolve().parents[2] / "buildspecs" / "images"
    try:
        from wfbuild.pins import summary
    except ImportError:
        return None
    return summary(images, cuda) if (images / "base-images.lock").is_file() else None


def _index_serve(args: argparse.Namespace) -> int:
    import boto3

    from wheelfoundry_cli.index_server import serve_forever

    serve_forever(boto3.client("s3", region_name=args.region), args.bucket, args.port)
    return 0


LOCAL_COMMANDS = frozenset({"local"})
USER_COMMANDS = frozenset({"start", "status", "runs", "logs", "fetch", "cancel", "index"})


def _command_word(argv: Sequence[str] | None) -> str | None:
    """The subcommand named on the command line (None: none yet, e.g. --help): which modules to load."""
    return next((a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")), None)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line; the embedded AWS (moto, boto3) and the user's commands are imported only
    when the command needs them, so `plan` and `catalog` start in a fraction of a second."""
    word = _command_word(argv)
    everything = word is None or word not in {"plan", "catalog", *LOCAL_COMMANDS, *USER_COMMANDS}
    parser = argparse.ArgumentParser(prog="wheelfoundry", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    plan = sub.add_parser(
        "plan", help="validate a request; show its jobs, where each runs (EC2 or CodeBuild) and cost; launches nothing"
    )
    plan.add_argument("request", nargs="?", help="a request JSON file or a preset name (e.g. nightly)")
    plan.add_argument("--json", action="store_true", help="print the jobs as JSON (the job contract)")
    plan.add_argument("--dry-run", action="store_true", help="also show each job's image, environment and stages")
    plan.add_argument(
        "--usage",
        action="append",
        default=[],
        metavar="MANIFEST",
        help="an earlier run's manifest.json of the same source: size its extension job by the cores it kept busy",
    )
    plan.add_argument(
        "--explain", action="store_true", help="say why each job runs on EC2 or CodeBuild (both costs, or the limit)"
    )
    add_builder_flags(plan)
    plan.set_defaults(func=_plan_command)
    index = sub.add_parser("index", help="the private pip index in the wheel bucket")
    index_sub = index.add_subparsers(dest="index_command", required=True)
    serve = index_sub.add_parser("serve", help="serve the index to pip on 127.0.0.1 (your AWS credentials)")
    serve.add_argument("--bucket", required=True, help="the stack's WheelBucketName output")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
    serve.set_defaults(func=_index_serve)
    add_catalog_commands(sub)
    if everything or word in LOCAL_COMMANDS:
        try:
            from wheelfoundry_local.cli import add_local_commands
        except ImportError:  # a plain install without the [local] extra has no local mode
            pass
        else:
            add_local_commands(sub)
    if everything or word in USER_COMMANDS:
        from wheelfoundry_user.commands import add_user_commands

        add_user_commands(sub, index_sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser(argv).parse_args(argv)
    try:
        code: int = args.func(args)
    except RequestInvalid as exc:
        # One problem (a file the JSON parser refuses, say) is one line; several are listed.
        text = str(exc.issues[0]) if len(exc.issues) == 1 else str(exc)
        print(f"error: {text}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
