"""An extension request's ``exclude``: cells of its torch x CUDA x Python x platform matrix not to build.

Each entry names some of ``torch``, ``cuda``, ``python`` and ``platform``; a cell is left out when an entry
matches every key it names (GitHub Actions' ``matrix.exclude``). So a request can state a matrix that is not
a full cross product: the watcher (wheelfoundry.watch.watcher) asks for exactly the cells a channel lacks, and a
torch release that offers no CUDA 12.8 or no Python 3.10 is excluded there instead of refused.

The same test answers for a partial combination: ``excluded(entries, torch="2.12", cuda="12.8")`` is true only
when an entry names nothing beyond those keys, i.e. when every cell of (torch 2.12, CUDA 12.8) is left out;
semantics uses it to skip the "not available for torch X" checks of combinations no cell asks for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations, product
from typing import Any

KEYS = ("torch", "cuda", "python", "platform")
Entry = tuple[tuple[str, str], ...]  # sorted (key, value) pairs: hashable, as the typed request keeps them


def parse(value: Any) -> tuple[Entry, ...]:
    """The schema-checked list as typed entries (anything else: none; the schema reported it)."""
    if not isinstance(value, list):
        return ()
    return tuple(
        tuple(sorted((k, v) for k, v in item.items() if k in KEYS and isinstance(v, str)))
        for item in value
        if isinstance(item, Mapping)
    )


def excluded(entries: Iterable[Entry | Mapping[str, str]], **assignment: str) -> bool:
    """Whether some entry leaves out every cell that extends ``assignment`` (a full cell: that cell)."""
    for entry in entries:
        pairs = entry.items() if isinstance(entry, Mapping) else entry
        if pairs and all(assignment.get(key) == value for key, value in pairs):
            return True
    return False


Cell = tuple[str, str, str, str]  # (torch, cuda, python, platform), the order of KEYS


def cover(wanted: set[Cell], axes: Sequence[Sequence[str]]) -> tuple[tuple[list[str], ...], list[dict[str, str]]]:
    """``((torch, cuda, python, platforms), exclude)``: the smallest box holding ``wanted`` and the entries that
    leave out the rest of it, the broadest first ((torch, cuda) before single cells), so the request says
    exactly ``wanted``. ``axes`` orders each key's values (the release's own order)."""
    box = tuple([v for v in axis if any(c[i] == v for c in wanted)] for i, axis in enumerate(axes))
    left = {c for c in product(*box) if c not in wanted}
    entries: list[dict[str, str]] = []
    for size in range(1, len(KEYS) + 1):
        for keys in combinations(range(len(KEYS)), size):
            for values in sorted({tuple(c[k] for k in keys) for c in left}):
                fixed = dict(zip(keys, values, strict=True))
                extension = set(product(*([fixed[i]] if i in fixed else box[i] for i in range(len(KEYS)))))
                if not extension & wanted and extension & left:
                    entries.append({KEYS[k]: v for k, v in fixed.items()})
                    left -= extension
    return box, entries
