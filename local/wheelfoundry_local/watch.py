"""``wheelfoundry local watch``: one watcher tick from this machine.

``--dry-run``: the subscriptions given as files or flags, upstream live (or ``--recorded DIR``), the channels as
``--index-state`` files say (else empty), the toolkit locks of this checkout plus the lock the watcher would write
for a CUDA 13+ toolkit the cells need (resolved from PyPI, written nowhere); prints that lock, what the tick
would start, each run's planned wall time and cost, and what it cannot build and why. Nothing needs a stack.
Without ``--dry-run``: the real tick (the WatchFunction's code) against a stack, ``local up``'s or AWS's.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from wheelfoundry_cli.subscription_flags import add_subscription_flags, subscriptions_from
from wheelfoundry_cli.watch_local import offline_tick, recorded, recording, render_tick

from wheelfoundry.aws.watch import FetchFailed, Sources, WatchSettings, run_tick, urllib_fetch
from wheelfoundry.config import load_config
from wheelfoundry.errors import Issue, RequestInvalid, SubscriptionInvalid
from wheelfoundry.planning.jobs import StackContext
from wheelfoundry.publishing.coverage import Coverage
from wheelfoundry.watch.subscriptions import parse_subscription
from wheelfoundry.watch.watch_facts import locks_of


def _coverage(paths: list[str]) -> dict[str, Coverage]:
    by_channel: dict[str, list[dict[str, Any]]] = {}
    for path in paths:
        try:
            state = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RequestInvalid([Issue("--index-state", f"{path}: {exc}", path)]) from exc
        by_channel.setdefault(str(state.get("channel", "extensions")), []).append(state)
    return {channel: Coverage.of(states) for channel, states in by_channel.items()}


def watch(args: argparse.Namespace) -> int:
    from wfbuild.images.pins import of_this_checkout  # the runner's package: a checkout always has it

    sources = Sources(args.pypi_url, args.pytorch_url)
    fetch = recorded(*(Path(p) for p in args.recorded)) if args.recorded else urllib_fetch
    if args.record:
        fetch = recording(Path(args.record), fetch)
    now = datetime.now(UTC)
    if args.dry_run:
        raws = subscriptions_from(args)
        if not raws:
            raise SubscriptionInvalid([Issue("--subscription", "name one (a file, or --package ... flags)", None)])
        subs = [parse_subscription(raw) for raw in raws]
        try:
            record = offline_tick(
                subs, fetch, sources, _coverage(args.index_state), locks_of(of_this_checkout(set())), load_config(), now
            )
        except FetchFailed as exc:
            print(f"wheelfoundry local watch: PyPI's torch page not read: {exc}")
            return 1
    else:
        from wheelfoundry_user.farm import Farm

        if args.subscription or args.package:
            print("wheelfoundry local watch: without --dry-run the stack's own subscriptions are followed")
            return 2
        farm = Farm(args.stack, endpoint_url=args.endpoint_url, region=args.region)
        settings = WatchSettings(farm.bucket, farm.state_machine_arn, load_config(), StackContext(), sources)
        record = run_tick(farm.client("s3"), farm.client("stepfunctions"), fetch, settings, now)
    print(json.dumps(record, indent=2) if args.json else render_tick(record, verbose=args.verbose))
    return 0


def add_watch_command(local_sub: Any) -> None:
    from wheelfoundry_user.farm import default_stack

    cmd = local_sub.add_parser(
        "watch", help="one watcher tick: --dry-run prints the runs it would start, their wall time and cost"
    )
    cmd.add_argument("--dry-run", action="store_true", help="start nothing; subscriptions from files or flags")
    add_subscription_flags(cmd)
    cmd.add_argument(
        "--recorded",
        metavar="DIR",
        action="append",
        help="upstream as recorded there (else the live indexes); again: more recordings, the first holding a URL wins",
    )
    cmd.add_argument("--record", metavar="DIR", help="also write every upstream response read there")
    cmd.add_argument("--pypi-url", default=Sources.pypi, help="PyPI or a mirror (default: %(default)s)")
    cmd.add_argument("--pytorch-url", default=Sources.pytorch, help="PyTorch's index (default: %(default)s)")
    cmd.add_argument("--index-state", metavar="FILE", action="append", default=[], help="a channel's .index-state.json")
    cmd.add_argument("--verbose", action="store_true", help="also each run's jobs")
    cmd.add_argument("--json", action="store_true", help="print the tick's record as JSON")
    cmd.add_argument("--stack", default=default_stack())
    cmd.add_argument("--endpoint-url", help="without --dry-run: e.g. `wheelfoundry local up`'s")
    cmd.add_argument("--region")
    cmd.set_defaults(func=watch)
