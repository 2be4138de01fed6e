"""A subscription from a JSON file and/or flags (`wheelfoundry subscribe`, `wheelfoundry local watch`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from wheelfoundry.errors import Issue, SubscriptionInvalid


def add_subscription_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--subscription", metavar="FILE", action="append", default=[], help="a subscription (JSON)")
    parser.add_argument("--package", help="the package (PyPI project name)")
    parser.add_argument("--pypi", metavar="VERSION", help="source: its sdist on PyPI, a release or latest")
    parser.add_argument("--git", metavar="URL", help="source: a git repository (with --ref)")
    parser.add_argument("--ref", help="the git ref (tag, branch or commit)")
    parser.add_argument("--torch", metavar="SPEC", help="torch releases to follow, e.g. '>=2.11'")
    parser.add_argument("--cuda", help="all, all-cuda, or variants like cpu,13.0 (default: all)")
    parser.add_argument("--python", help="Pythons, e.g. 3.10,3.11 (default: every one a release offers)")
    parser.add_argument("--platforms", help="x86_64 and/or aarch64 (default: x86_64)")
    parser.add_argument("--channel", help="the channel the wheels publish to (default: extensions)")
    parser.add_argument("--name", help="the subscription's name (default: the package's)")


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def subscriptions_from(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each --subscription file, with the flags laid over it; the flags alone make one (RequestInvalid-style
    errors name the file or flag)."""
    raws: list[dict[str, Any]] = []
    for name in args.subscription:
        try:
            value = json.loads(Path(name).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SubscriptionInvalid([Issue("--subscription", f"{name}: {exc}", name)]) from exc
        raws.append(value if isinstance(value, dict) else {"": value})
    flags: dict[str, Any] = {}
    for key in ("package", "torch", "channel", "name"):
        if getattr(args, key, None):
            flags[key] = getattr(args, key)
    if args.pypi:
        flags["source"] = {"pypi": args.pypi}
    elif args.git:
        flags["source"] = {"git": args.git, **({"ref": args.ref} if args.ref else {})}
    if args.cuda:
        flags["cuda"] = args.cuda if args.cuda in ("all", "all-cuda") else _csv(args.cuda)
    for key in ("python", "platforms"):
        if getattr(args, key, None):
            flags[key] = _csv(getattr(args, key))
    if not raws:
        return [flags] if flags else []
    return [{**raw, **flags} for raw in raws]
