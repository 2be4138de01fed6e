"""`wheelfoundry toolkits list|approve`: the CUDA toolkit locks the stack's watcher wrote (toolkits/ in its bucket).

A CUDA release newer than the deployment is locked by the watcher itself (wheelfoundry.toolkits.stack_toolkits). With
the stack parameter ``ToolkitApproval=manual`` a new lock waits, unapproved, and so do the cells that need it;
`approve` flips ``approved`` in ``toolkits/index.json``. It runs with the operator's own AWS credentials: no
role of the stack but the watcher's may write under ``toolkits/``, and the lock files themselves (named by
their sha256) are never rewritten, only the record's flag.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from wheelfoundry_user import EXIT_OK, NotFound, UserError
from wheelfoundry_user.farm import Farm, aws_problem
from wheelfoundry_user.tables import table


def _record(farm: Farm) -> dict[str, Any]:
    from wheelfoundry.toolkits import stack_toolkits

    body = farm.get(stack_toolkits.INDEX_KEY)
    if body is None:
        return {}
    record, problems = stack_toolkits.parse(body)
    for problem in problems:
        print(f"warning: {problem}")
    return record


def lines(record: Mapping[str, Any]) -> list[str]:
    rows = [
        (
            e.cuda,
            e.platform,
            e.row.toolkit,
            "yes" if e.approved else "NO: waiting",
            e.sha256[:16],
            e.written_at,
            e.sources.get("archs", ""),
        )
        for _, e in sorted(record.items())
    ]
    head = ("CUDA", "PLATFORM", "RELEASE", "APPROVED", "SHA256", "WRITTEN", "ARCH LIST FROM")
    return [table(head, rows)] if rows else ["no toolkit locked by the watcher (toolkits/index.json)"]


def _list(farm: Farm, args: argparse.Namespace) -> int:
    record = _record(farm)
    if args.json:
        print(json.dumps({n: e.to_json() for n, e in sorted(record.items())}, indent=2))
    else:
        print("\n".join(lines(record)))
    return EXIT_OK


def approve(s3: Any, bucket: str, cuda: str, platforms: list[str]) -> list[Any]:
    """Approve (cuda, platforms) in the record as it is when written (a tick may write it meanwhile, and its new
    locks stay); the entries approved. UserError where the record kept changing under the write."""
    from wheelfoundry.aws import toolkits
    from wheelfoundry.toolkits import stack_toolkits

    flipped: list[Any] = []

    def change(record: dict[str, Any]) -> Mapping[str, Any] | None:
        flipped[:] = stack_toolkits.approve(record, cuda, platforms, datetime.now(UTC).isoformat())
        return stack_toolkits.merge(record, flipped) if flipped else None

    _, written = toolkits.update_record(s3, bucket, change)
    if not written:
        raise UserError(
            f"{stack_toolkits.INDEX_KEY} kept changing while it was written (or could not be read): run again"
        )
    return flipped


def _approve(farm: Farm, args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    record = _record(farm)
    platforms = [args.platform] if args.platform else []
    waiting = [e for e in record.values() if e.cuda == args.cuda and not e.approved]
    if not any(not platforms or e.platform in platforms for e in waiting):
        known = ", ".join(f"{e.cuda} {e.platform}{'' if e.approved else ' (waiting)'}" for e in record.values())
        raise NotFound(f"no unapproved CUDA {args.cuda} lock{' for ' + args.platform if args.platform else ''}; "
                       f"the stack's locks: {known or 'none'}")  # fmt: skip
    try:
        flipped = approve(farm.client("s3"), farm.bucket, args.cuda, platforms)
    except (ClientError, BotoCoreError) as exc:
        raise aws_problem(exc) from None
    for e in flipped:
        print(f"approved CUDA {e.cuda} {e.platform}: {e.key} (sha256 {e.sha256}); the next watcher tick builds with it")
    if not flipped:  # another approval flipped it between this command's read and its write
        print(f"CUDA {args.cuda}: already approved meanwhile; nothing to do")
    return EXIT_OK


def add_toolkit_commands(sub: Any, common: Any, guard: Any) -> None:
    def with_farm(func: Any) -> Any:
        return guard(lambda args: func(Farm(args.stack, endpoint_url=args.endpoint_url, region=args.region), args))

    group = sub.add_parser("toolkits", help="the CUDA toolkit locks the stack's watcher wrote")
    group_sub = group.add_subparsers(dest="toolkits_command", required=True)
    listing = group_sub.add_parser("list", help="each lock: CUDA, platform, release, approved, sha256, sources")
    common(listing)
    listing.set_defaults(func=with_farm(_list))
    approving = group_sub.add_parser(
        "approve", help="let the watcher build with a lock it wrote (ToolkitApproval=manual)"
    )
    approving.add_argument("cuda", help="the CUDA version, e.g. 13.2")
    approving.add_argument("--platform", choices=("x86_64", "aarch64"), help="one platform (default: each waiting one)")
    common(approving, json_flag=False)
    approving.set_defaults(func=with_farm(_approve))
