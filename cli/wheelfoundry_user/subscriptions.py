"""`wheelfoundry subscribe`, `wheelfoundry subscriptions list|remove`, and the watcher's part of `status`.

A subscription is checked here as the stack checks it (its schema, then its build fields as Validate would
take them in a request), then kept as ``subscriptions/<name>.json`` in the stack's bucket; the watcher
follows it from its next tick. ``--notify ADDRESS`` subscribes an e-mail address to the stack's WatchTopic,
filtered to this subscription's runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from wheelfoundry_user import EXIT_OK, NotFound, UserError
from wheelfoundry_user.farm import Farm, aws_problem
from wheelfoundry_user.tables import table

TICK_KEY = "watch/last-tick.json"


def _subscribe(farm: Farm, args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError
    from wheelfoundry_cli.subscription_flags import subscriptions_from

    from wheelfoundry.catalog.catalog import load_catalog
    from wheelfoundry.config import load_config
    from wheelfoundry.errors import Issue, SubscriptionInvalid
    from wheelfoundry.watch.subscriptions import parse_subscription, sample_issues

    raws = subscriptions_from(args)
    if len(raws) != 1:
        raise SubscriptionInvalid([Issue("--subscription", "give one subscription (a file, or --package flags)", None)])
    sub = parse_subscription(raws[0])  # SubscriptionInvalid: exit 2, every problem named
    if issues := sample_issues(sub, load_catalog(), load_config()):
        raise SubscriptionInvalid(issues)
    body = json.dumps({**sub.raw, "name": sub.name}, indent=2, sort_keys=True).encode()
    topic = farm.outputs.get("WatchTopicArn")
    if args.notify and not topic:
        raise UserError(f"stack {farm.stack!r} has no WatchTopic output: deploy this version to be notified")
    try:
        farm.client("s3").put_object(Bucket=farm.bucket, Key=sub.key, Body=body, ContentType="application/json")
        if args.notify:
            attributes = {"FilterPolicy": json.dumps({"subscription": [sub.name]})}
            farm.client("sns").subscribe(
                TopicArn=topic,
                Protocol="email",
                Endpoint=args.notify,
                Attributes=attributes,
            )
    except (ClientError, BotoCoreError) as exc:
        raise aws_problem(exc) from None
    print(f"subscription {sub.name}: s3://{farm.bucket}/{sub.key}; the watcher follows it from its next tick")
    if args.notify:
        print(f"{args.notify}: confirm the e-mail AWS sends to hear of {sub.name}'s runs")
    return EXIT_OK


def stored(farm: Farm) -> list[dict[str, Any]]:
    found = []
    for key in farm.keys("subscriptions/"):
        value = farm.get_json(key) if key.endswith(".json") else None
        if isinstance(value, dict):
            found.append(value)
    return found


def last_tick(farm: Farm) -> dict[str, Any] | None:
    value = farm.get_json(TICK_KEY)
    return value if isinstance(value, dict) else None


def _source(sub: dict[str, Any]) -> str:
    source = sub.get("source") or {}
    if "pypi" in source:
        return f"PyPI {source['pypi']}"
    if "git" in source:
        return f"{source['git']}@{source.get('ref')}"
    return str(source.get("s3", "?"))


def watch_lines(subs: list[dict[str, Any]], tick: dict[str, Any] | None) -> list[str]:
    """The subscriptions with what the last tick did for each (status, `subscriptions list`)."""
    if not subs:
        return ["no subscriptions (wheelfoundry subscribe)"]
    seen = (tick or {}).get("subscriptions") or {}
    runs = (tick or {}).get("runs") or []
    rows = []
    for sub in sorted(subs, key=lambda s: str(s.get("name"))):
        name = str(sub.get("name"))
        outcome = seen.get(name)
        if outcome is None:
            last = "not ticked yet"
        else:
            mine = [r for r in runs if r.get("subscription") == name]
            last = "; ".join(f"{r.get('status')} {r.get('name')}" for r in mine) or (
                "up to date" if not outcome.get("missing") else f"{outcome.get('missing')} cell(s) missing"
            )
            if outcome.get("problems"):
                last += f"; {len(outcome['problems'])} problem(s)"
        cuda = sub.get("cuda", "all")
        rows.append(
            (
                name,
                sub.get("package"),
                _source(sub),
                sub.get("torch"),
                cuda if isinstance(cuda, str) else ",".join(cuda),
                sub.get("channel", "extensions"),
                last,
            )
        )
    at = (tick or {}).get("at", "never")
    lines = [f"subscriptions (last watcher tick: {at})"]
    lines.append(table(("NAME", "PACKAGE", "SOURCE", "TORCH", "CUDA", "CHANNEL", "LAST TICK"), rows))
    problems = [f"  {n}: {p}" for n, o in sorted(seen.items()) for p in o.get("problems") or []]
    return lines + (["problems of the last tick:", *problems] if problems else [])


def release_lines(tick: dict[str, Any] | None) -> list[str]:
    """Per subscription and torch release of the last tick: cells served, missing (and the run for them, with
    its status) and the variants not built with why; a tick written before these were recorded says so."""
    seen = (tick or {}).get("subscriptions") or {}
    status = {r.get("name"): r.get("status") for r in (tick or {}).get("runs") or []}
    lines = []
    for name, outcome in sorted(seen.items()):
        by_release = outcome.get("by_release")
        if by_release is None:
            lines.append(f"  {name}: per-release cells not in this tick's record (a watcher older than this one)")
            continue
        for release, cells in by_release.items():
            text = f"  {name} torch {release}: served {cells.get('served', 0)}, missing {cells.get('missing', 0)}"
            if cells.get("missing"):
                run = cells.get("run")
                text += f" (run {run}: {status.get(run, 'not started')})" if run else " (no run planned)"
            lines.append(text)
            lines += [f"    not built: {why}" for why in cells.get("not_built") or []]
    return ["cells per torch release (last tick):", *lines] if lines else []


def _list(farm: Farm, args: argparse.Namespace) -> int:
    subs, tick = stored(farm), last_tick(farm)
    if args.json:
        print(json.dumps({"subscriptions": subs, "last_tick": tick}, indent=2))
    else:
        print("\n".join([*watch_lines(subs, tick), *release_lines(tick)]))
    return EXIT_OK


def _remove(farm: Farm, args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from wheelfoundry.watch.subscriptions import NAME, key

    if not NAME.fullmatch(args.name) or farm.get(key(args.name)) is None:
        raise NotFound(f"no subscription {args.name!r} (wheelfoundry subscriptions list)")
    try:
        farm.client("s3").delete_object(Bucket=farm.bucket, Key=key(args.name))
    except (ClientError, BotoCoreError) as exc:
        raise aws_problem(exc) from None
    print(f"subscription {args.name} removed: the watcher starts no more runs for it (running ones go on)")
    return EXIT_OK


def add_subscription_commands(sub: Any, common: Any, guard: Any) -> None:
    from wheelfoundry_cli.subscription_flags import add_subscription_flags

    def with_farm(func: Any) -> Any:
        return guard(lambda args: func(Farm(args.stack, endpoint_url=args.endpoint_url, region=args.region), args))

    subscribe = sub.add_parser("subscribe", help="follow a package: build its wheels for each new torch release")
    add_subscription_flags(subscribe)
    subscribe.add_argument("--notify", metavar="ADDRESS", help="e-mail this address each run's outcome")
    common(subscribe, json_flag=False)
    subscribe.set_defaults(func=with_farm(_subscribe))
    group = sub.add_parser("subscriptions", help="the packages the stack follows")
    group_sub = group.add_subparsers(dest="subscriptions_command", required=True)
    listing = group_sub.add_parser("list", help="each subscription and what the last watcher tick did for it")
    common(listing)
    listing.set_defaults(func=with_farm(_list))
    remove = group_sub.add_parser("remove", help="stop following a package")
    remove.add_argument("name")
    common(remove, json_flag=False)
    remove.set_defaults(func=with_farm(_remove))


def status_section(farm: Farm) -> list[str]:
    """`wheelfoundry status`'s watcher lines; none where the bucket cannot be read for them."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        subs = stored(farm)
    except (UserError, ClientError, BotoCoreError, ValueError) as exc:
        print(f"(subscriptions not read: {exc})", file=sys.stderr)
        return []
    return ["", *watch_lines(subs, last_tick(farm))] if subs else []
