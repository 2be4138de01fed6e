"""The ``wheelfoundry`` command: plan requests, and run the embedded AWS locally.

Exit codes: 0 done, 1 the run failed, 2 the input was invalid (every problem is printed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.errors import Issue, RequestInvalid
from wheelfoundry.planning.plan import Plan
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.pins import unbuildable
from wheelfoundry.request.request import parse_request
from wheelfoundry.toolkits import stack_toolkits
from wheelfoundry_cli.catalog_commands import add_catalog_commands
from wheelfoundry_cli.newer_torch import Found, catalog_for, newer_minors
from wheelfoundry_cli.quota_check import add_quota_flags, quota_lines
from wheelfoundry_cli.render import abi_lines, render_dry_run, render_plan
from wheelfoundry_cli.request_flags import add_builder_flags, build_raw_request


def _plan_command(args: argparse.Namespace) -> int:
    raw = build_raw_request(args, os.environ)
    catalog, config = load_catalog(), load_config()
    newer = _newer_torch(args, raw, catalog, config)  # None: the catalog has every torch named
    catalog = newer.catalog if newer else catalog
    record = _calibration(args.calibration)
    profile = _source_profile(args.source)
    plan: Plan = plan_request(parse_request(raw, catalog, config), catalog, config, record=record, profile=profile)
    checked = quota_lines([*plan.jobs, *plan.tests], config, args.quota, args.max_concurrency)  # as Validate
    sizes, size_lines = _wheel_sizes(plan, args.sizes_from)
    if args.json:
        images = {"images": [image.to_dict() for image in plan.images]}  # runtime image contracts (issue 11)
        merged = {"merged_wheels": [dataclasses.asdict(e) for e in sizes]}
        print(
            json.dumps({**plan.summary(), "jobs": [job.to_dict() for job in plan.jobs], **images, **merged}, indent=2)
        )
    elif args.dry_run:
        print(render_dry_run(plan, explain=args.explain) + size_lines)
    else:
        print(render_plan(plan, explain=args.explain) + size_lines)
    if not args.json and any(
        j.extension and j.extension.abi == "stable" for j in plan.jobs
    ):  # built once: vs per torch
        per_torch = parse_request({**raw, "abi": "per-torch"}, catalog, config)
        print("\n".join(abi_lines(plan, plan_request(per_torch, catalog, config, record=record, profile=profile))))
    if not args.json:
        print("\n" + "\n".join(checked))
        if newer:
            minors = ", ".join(newer_minors(raw, load_catalog()))
            print(f"\nnote: torch {minors} is newer than the catalog: facts from {newer.where}")
    toolkits = {f"{j.image.build_args['CUDA_VERSION']}-{j.platform}" for j in plan.jobs if j.cuda}
    pins = stack_toolkits.with_stack_pins(checkout_pins(toolkits), newer.record if newer else {})  # as Validate
    if not args.json and (issues := unbuildable(plan.jobs, plan.images, pins)):
        print(f"\nnote: a stack deployed from this checkout would refuse {len(issues)} image(s) (docs/security.md §5):")
        print("\n".join(f"  - {issue}" for issue in issues))
    return 0


def _newer_torch(args: argparse.Namespace, raw: Any, catalog: Any, config: Any) -> Found | None:
    """A torch release newer than the catalog (an extension request): its facts from --stack, else upstream."""
    if not newer_minors(raw, catalog):
        return None  # no AWS or network for a request the catalog answers
    from wheelfoundry.aws.watch import Sources, urllib_fetch

    farm = None
    if args.stack:
        from wheelfoundry_user.farm import Farm

        farm = Farm(args.stack, endpoint_url=args.endpoint_url, region=args.region)
    return catalog_for(raw, catalog, config, farm, urllib_fetch, Sources(args.pypi_url, args.pytorch_url))


def _calibration(path: str | None) -> dict[str, Any] | None:
    """--calibration: a source's recorded cells as Report keeps them (s3://<bucket>/calibration/<key>.json)."""
    if not path:
        return None
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(record, dict) or not isinstance(record.get("cells"), list):
            raise ValueError("no list of cells")
    except (OSError, ValueError) as exc:
        allowed = ("a calibration record: {'scope': ..., 'cells': [...]}",)
        raise RequestInvalid([Issue("--calibration", f"{path}: {exc}", path, allowed)]) from exc
    return record


def _source_profile(path: str | None) -> Any:
    """--source: the extension's folder or sdist, whose translation units size a first run's estimate."""
    if not path:
        return None
    from wheelfoundry.planning.source_profile import from_path

    try:
        return from_path(Path(path))
    except ValueError as exc:
        raise RequestInvalid([Issue("--source", str(exc), path, ("a source folder", "an sdist .tar.gz"))]) from exc


def _wheel_sizes(plan: Plan, sizes_from: str | None) -> tuple[list[Any], str]:
    """Each merged wheel's estimated size, and a warning where it would exceed the publish target's limit."""
    from wheelfoundry_cli import wheel_sizes

    known = wheel_sizes.measured_cells(sorted(Path(sizes_from).glob("*.whl"))) if sizes_from else {}
    estimates = wheel_sizes.estimate(plan.jobs, known)
    if not estimates:
        return [], ""
    lines = ["", "merged wheels (estimated size):", *(f"  {e.describe()}" for e in estimates)]
    lines += [f"warning: {w}" for w in wheel_sizes.warnings(estimates, plan.request.options.publish)]
    return estimates, "\n".join(lines)


def checkout_pins(cuda: set[str] | None = None) -> dict[str, Any] | None:
    """What this checkout's build bundle can build images from (``cuda``: the toolkit locks to read in full);
    None where there is no checkout beside the package (wfbuild.images.pins.of_this_checkout)."""
    try:
        from wfbuild.images.pins import of_this_checkout
    except ImportError:
        return None
    return of_this_checkout(cuda)


def _index_serve(args: argparse.Namespace) -> int:
    from wheelfoundry_cli.index_server import serve_forever
    from wheelfoundry_user import UserError, public, verify
    from wheelfoundry_user.farm import Farm

    try:
        if args.index_url:  # a public site: no AWS credentials, the key pinned by fingerprint
            site = public.PublicIndex.parse(args.index_url)
            pins = (args.key_fingerprint, args.public_key, args.index_url)
            keys = None if args.no_verify else public.keyring_for(site, *pins)
            origin: Any = public.HttpOrigin(site)
            bucket, label = "public", f"{site.base}/simple/"
        else:
            farm = Farm(args.stack, endpoint_url=args.endpoint_url, region=args.region)
            keys = None if args.no_verify else verify.keyring(farm, args.public_key or [])
            bucket = args.bucket or farm.bucket
            origin, label = farm.client("s3"), f"s3://{bucket}/simple/"
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    if keys is None:
        print("warning: --no-verify: wheels are served without checking their signed provenance", file=sys.stderr)
    serve_forever(origin, bucket, args.port, keys, label)
    return 0


LOCAL_COMMANDS = frozenset({"local"})
USER_COMMANDS = frozenset(
    {"start", "status", "runs", "logs", "fetch", "cancel", "index", "subscribe", "subscriptions", "toolkits"}
)


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
        "--explain", action="store_true", help="say why each job runs on EC2 or CodeBuild (both costs, or the limit)"
    )
    plan.add_argument(
        "--sizes-from", metavar="DIR", help="merged wheels of an earlier run (wheelfoundry fetch): measured cell sizes"
    )
    plan.add_argument(
        "--calibration",
        metavar="FILE",
        help="an earlier run's record of this source (calibration/<key>.json in the bucket): plan by its cells",
    )
    plan.add_argument(
        "--source",
        metavar="PATH",
        help="the extension's source folder or sdist: a first run's estimate from its C++ and CUDA units",
    )
    newer = plan.add_argument_group("a torch release newer than the catalog (an extension request)")
    newer.add_argument("--stack", help="its facts from this stack's watcher (watch/derived.json); else from PyPI")
    newer.add_argument("--endpoint-url", help="with --stack: e.g. `wheelfoundry local up`'s")
    newer.add_argument("--region", help="with --stack")
    newer.add_argument("--pypi-url", default="https://pypi.org/", help="PyPI or a mirror (default: %(default)s)")
    newer.add_argument(
        "--pytorch-url", default="https://download.pytorch.org/whl/", help="PyTorch's index (default: %(default)s)"
    )
    add_builder_flags(plan)
    add_quota_flags(plan)
    plan.set_defaults(func=_plan_command)
    add_catalog_commands(sub)
    if not (everything or word == "index" or word in LOCAL_COMMANDS or word in USER_COMMANDS):
        return parser  # `plan`, `catalog`: no AWS session, trust store or embedded AWS to import
    index = sub.add_parser("index", help="the private pip index in the wheel bucket")
    index_sub = index.add_subparsers(dest="index_command", required=True)
    serve = index_sub.add_parser("serve", help="serve the index to pip on 127.0.0.1 (your AWS credentials)")
    serve.add_argument("--bucket", help="the stack's WheelBucketName output (default: read from --stack)")
    serve.add_argument("--index-url", help="a public index instead (https://HOST/simple/), no AWS credentials needed")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
    from wheelfoundry_user.farm import default_stack
    from wheelfoundry_user.trust import add_trust_flags

    serve.add_argument("--stack", default=default_stack(), help="whose KMS key signs the wheels (default: %(default)s)")
    serve.add_argument("--endpoint-url", help="e.g. `wheelfoundry local up`'s")
    add_trust_flags(serve, expectations=False)
    serve.set_defaults(func=_index_serve)
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
