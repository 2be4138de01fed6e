"""The facts a plan needs of a CUDA toolkit beyond its lock, and the interface that gives them.

A stack toolkit's catalog row (wheelfoundry.toolkits.stack_toolkits) takes its lock's release and requirement lines
from the lock itself; its arch list, host compiler range and build variables come from ``facts(cuda,
platform, torch_release) -> Facts``, injected into the watcher (aws.watch.WatchSettings.facts). Each fact
carries its source, and the row keeps it. ``assumed_facts`` is the stop-gap default: it reads nothing
upstream and says so in every source.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from packaging.version import Version

from wheelfoundry.catalog.catalog import Catalog

ROW_FACTS = ("archs", "default_arch_list", "gcc_max", "env")  # what a facts reader gives (the rest: the lock)


@dataclass(frozen=True)
class Facts:
    """What a plan needs of a toolkit beyond its lock: ``facts(cuda, platform, torch_release)`` returns it."""

    archs: tuple[str, ...]
    default_arch_list: str
    gcc_max: int
    env: Mapping[str, str] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)  # each of ROW_FACTS -> where it was read


FactsOf = Callable[[str, str, str], Facts]  # (cuda, platform, torch release) -> Facts


def assumed_facts(catalog: Catalog) -> FactsOf:
    """The stop-gap ``facts``: archs, default arch list, gcc_max and env of the newest committed row of the same
    CUDA major (else the newest row), and each source says it was assumed, not read (toolkit_facts reads them)."""

    def facts(cuda: str, platform: str, torch_release: str) -> Facts:
        rows = [r for r in catalog.cuda.values() if r.requirements]
        same = [r for r in rows if Version(r.version).major == Version(cuda).major] or rows
        base = max(same, key=lambda r: Version(r.version))
        why = f"assumed from CUDA {base.version}'s row: not read for CUDA {cuda} (torch {torch_release})"
        return Facts(base.archs, base.default_arch_list, base.gcc_max, dict(base.env), dict.fromkeys(ROW_FACTS, why))

    return facts


def upstream_or_assumed(read: FactsOf, catalog: Catalog) -> FactsOf:
    """``read`` (toolkit_facts: the torch wheel's own device code, the locked compiler's host_config.h), and
    where upstream cannot be read (an index down, a wheel laid out unlike torch's), the assumed row with the
    reason in every source: the record says which facts were read and which were not."""
    assumed = assumed_facts(catalog)

    def facts(cuda: str, platform: str, torch_release: str) -> Facts:
        try:
            return read(cuda, platform, torch_release)
        except Exception as exc:  # anything upstream can throw at a partial read: the row says why, not a crash
            found = assumed(cuda, platform, torch_release)
            why = f"upstream not read ({str(exc)[:200]})"
            return dataclasses.replace(found, sources={k: f"{why}; {v}" for k, v in found.sources.items()})

    return facts
