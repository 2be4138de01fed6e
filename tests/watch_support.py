"""What the watcher's tests share: the recorded upstream indexes (tests/fixtures/watch) and channels built
from cells, as the index state records published wheels."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from wheelfoundry_cli.watch_local import recorded

from wheelfoundry.aws.toolkits import with_record
from wheelfoundry.aws.watch import Sources, read_upstream
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.publishing.coverage import Coverage
from wheelfoundry.toolkits.stack_toolkits import StackToolkit, entry
from wheelfoundry.toolkits.toolkit_lock_file import render
from wheelfoundry.toolkits.toolkit_row import assumed_facts
from wheelfoundry.watch.subscriptions import Subscription, parse_subscription
from wheelfoundry.watch.watcher import Stack, Tick, Upstream, tick

RECORDED = Path(__file__).parent / "fixtures" / "watch"
# Toolkit locks as a deployed bundle records them: this checkout's (no CUDA 13.2).
LOCKS = {
    f"{cuda}-{platform}": True
    for cuda in ("11.7", "11.8", "12.1", "12.4", "12.6", "12.8", "12.9", "13.0")
    for platform in ("x86_64", "aarch64")
    if platform == "x86_64" or cuda in ("12.6", "12.8", "12.9", "13.0")
}
SCATTER = {
    "package": "torch-scatter",
    "source": {"pypi": "2.1.2"},
    "torch": ">=2.11",
    "cuda": "all",
    "python": ["3.10", "3.11", "3.12", "3.13"],
}
Cell = tuple[str, str, str, str]


def upstream(root: Path = RECORDED, subs: Iterable[Subscription] = ()) -> Upstream:
    return read_upstream(recorded(root), Sources(), list(subs), load_catalog())


def subscription(**changes: Any) -> Subscription:
    return parse_subscription({**SCATTER, **changes})


def state(project: str, version: str, cells: Iterable[Cell], channel: str = "extensions") -> dict[str, Any]:
    """An index state holding one per-cell wheel per (torch, variant, python, platform) cell."""
    wheels = {}
    for torch, variant, python, platform in cells:
        label = "cpu" if variant == "cpu" else "cu" + variant.replace(".", "")
        minor = "".join(torch.split(".")[:2])
        tag = "cp" + python.replace(".", "")
        dist = project.replace("-", "_")
        name = f"{dist}-{version}+pt{minor}{label}-{tag}-{tag}-manylinux_2_28_{platform}.whl"
        exact = torch if torch.count(".") == 2 else f"{torch}.0"
        wheels[f"wheels/{channel}/{project}/{name}"] = {"sha256": "0" * 64, "variants": [f"torch-{exact}+{label}"]}
    return {"format": 1, "channel": channel, "wheels": wheels}


def run_tick(
    subs: list[Subscription],
    published: dict[str, Any] | None = None,
    locks: dict[str, bool] | None = None,
    toolkits: dict[str, StackToolkit] | None = None,
) -> Tick:
    """The pure tick; ``toolkits``: the stack's record (toolkits/index.json) as the watcher plans with it."""
    coverage = {"extensions": Coverage.of([published or {}])}
    bundle = LOCKS if locks is None else locks
    stack = with_record(Stack("wf-bucket", load_catalog(), load_config(), bundle), bundle, toolkits or {}, {})
    return tick(subs, upstream(subs=subs), coverage, stack)


def stack_toolkit(cuda: str = "13.2", platform: str = "x86_64", approved: bool = True) -> StackToolkit:
    """A record entry as the watcher writes one (a small lock: compiler and one library line)."""
    wheels = [
        {"name": "nvidia-cuda-nvcc", "version": f"{cuda}.86", "part": "compiler", "file": "nvcc.whl",
         "sha256": "a" * 64, "url": "https://files.example.org/nvcc.whl"},
    ]  # fmt: skip
    lock = {"cuda": cuda, "platform": platform, "release": f"{cuda}.2", "wheel": wheels,
            "requirements": {"nvidia-cublas==13.4.1.3": ["nvidia-cublas==13.4.1.3"]}, "unavailable": {}}  # fmt: skip
    body = render(lock, "tests").encode()
    facts = assumed_facts(load_catalog())(cuda, platform, "2.15.0")
    return entry(lock, body, facts, approved, "2026-11-27T09:00:00+00:00", "torch 2.15.0 needs it")


def cells_of(tick_result: Tick) -> list[set[Cell]]:
    return [set(start.cells) for start in tick_result.starts]
