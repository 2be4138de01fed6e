"""Which wheels each index of a channel lists: the channel-wide one, and one per (torch minor, variant).

download.pytorch.org's ``/whl/cu130/`` is the model: one index a user of that variant points at, holding
everything they need. ``simple/<channel>/torch2.11-cu130/`` (the name of the cell builds, ``torch2.11-cu130``,
as Merge records them) lists, per project:

- the merged wheels that hold a build for torch 2.11 + cu130 (their ``Requires-Dist: torch`` covers it);
- the per-cell wheels built for it (``+pt211cu130``), and no other cell's;
- every wheel of the channel built for no cell (a pure dependency from another job), so a dependency from
  the same channel resolves through the one index.

The channel-wide ``simple/<channel>/`` must be right for any torch, and local labels cannot choose a build
(``+pt212cu130`` beats ``+pt211cu130`` for a user of 2.11, ``+pt29`` beats ``+pt211``). So it lists merged
and plain wheels, and a per-cell wheel only where the resolver can tell it from its siblings: it carries a
torch pin, and no other cell's wheel of the same file name (without the label) carries the same pin; a cpu
and a cu130 build of one torch pin the same torch, and only the variant index can choose between them.

The older per-variant pages (``torch-2.11.0+cu130/`` and ``torch-2.11.0+cu130.html``, per-cell wheels only)
are still written: the run report's find-links URLs name them.
"""

from __future__ import annotations

import re
from collections import defaultdict

from packaging.utils import parse_wheel_filename

from wheelfoundry.publishing.index_pages import (
    HTML_TYPE,
    IndexFile,
    Pages,
    render_find_links,
    render_project,
    render_project_json,
    render_root,
    render_root_json,
)

VARIANT_NAME = re.compile(r"torch(?P<major>[0-9]+)\.(?P<minor>[0-9]+)-(?P<label>cpu|cu[0-9]{2,4})")
_CELL = re.compile(r"torch-(?P<major>[0-9]+)\.(?P<minor>[0-9]+)[0-9a-z.]*\+(?P<label>cpu|cu[0-9]{2,4})")


def short_name(variant: str) -> str:
    """``torch-2.11.0+cu130`` -> ``torch2.11-cu130``: the variant index a user types (one per torch minor)."""
    m = _CELL.fullmatch(variant)
    if m is None:
        raise ValueError(f"variant {variant!r} is not torch-<version>+<cpu|cuNNN>")
    return f"torch{m['major']}.{m['minor']}-{m['label']}"


def _unlabelled(filename: str) -> tuple[str, str, frozenset[object]]:
    name, version, _, tags = parse_wheel_filename(filename)
    return str(name), version.public, tags


def _is_cell(f: IndexFile) -> bool:
    """A per-cell wheel: one build for one (torch, variant). A merged wheel lists several, or carries no label."""
    return len(f.variants) == 1 and parse_wheel_filename(f.filename)[1].local is not None


def _label(variant: str) -> str | None:
    m = _CELL.fullmatch(variant)
    return m["label"] if m else None


def channel_files(files: list[IndexFile]) -> list[IndexFile]:
    """What the channel-wide page of a project lists: what is right for any torch (the module doc). Builds of
    one (name, public version, tags) are told apart only by their torch pins: cell wheels are listed where all
    of the group's builds are pinned cells of one variant, each pinning another torch. A merged or plain wheel
    beside them (its version sorts below any local label) or a second variant (cpu and cu130 pin the same
    torch) leaves the cells to the variant indexes."""
    groups: dict[tuple[object, ...], list[IndexFile]] = defaultdict(list)
    for f in files:
        groups[_unlabelled(f.filename)].append(f)
    told: set[str] = set()
    for group in groups.values():
        if not all(_is_cell(f) and f.requires_torch for f in group):
            continue
        pins = [f.requires_torch for f in group]
        if len({_label(f.variants[0]) for f in group}) == 1 and len(set(pins)) == len(pins):
            told |= {f.filename for f in group}
    return [f for f in files if not _is_cell(f) or f.filename in told]


def _plain_fits(f: IndexFile, name: str) -> bool:
    """A wheel built for no cell, on the variant index ``name``: one without a local label (a pure dependency),
    or a framework job's build of that variant (``torch-2.11.0+cu130`` on torch2.11-cu130 only)."""
    local = parse_wheel_filename(f.filename)[1].local
    index = VARIANT_NAME.fullmatch(name)
    if local is None or index is None:
        return local is None
    if local != index["label"]:
        return False
    project, version = parse_wheel_filename(f.filename)[:2]
    return project != "torch" or (version.major, version.minor) == (int(index["major"]), int(index["minor"]))


def variant_projects(projects: dict[str, list[IndexFile]]) -> dict[str, dict[str, list[IndexFile]]]:
    """short name -> project -> the files its variant index lists (the module doc)."""
    names = {short_name(v) for files in projects.values() for f in files for v in f.variants}
    out: dict[str, dict[str, list[IndexFile]]] = {}
    for name in sorted(names):
        found: dict[str, list[IndexFile]] = {}
        for project, files in projects.items():
            mine = [
                f
                for f in files
                if any(short_name(v) == name for v in f.variants) or (not f.variants and _plain_fits(f, name))
            ]
            if mine:
                found[project] = mine
        out[name] = found
    return out


def write_variants(pages: Pages, channel: str, projects: dict[str, list[IndexFile]]) -> dict[str, list[str]]:
    """Every variant index of the channel, and the older per-variant pages; what was written, by kind."""
    indexes = variant_projects(projects)
    for name, found in indexes.items():
        _write_index(pages, channel, name, found)
    return {"variant_indexes": sorted(indexes), "variants": _per_cell_pages(pages, channel, projects)}


def _write_index(pages: Pages, channel: str, name: str, found: dict[str, list[IndexFile]]) -> None:
    """``simple/<channel>/<name>/``: its root and a page per project (the wheels four folders up)."""
    up, base = "../../../../", f"simple/{channel}/{name}/"
    for project, files in found.items():
        html, json = render_project(channel, project, files, up), render_project_json(channel, project, files, up)
        pages.folder(f"{base}{project}/", html, json)
    pages.folder(base, render_root(f"{channel} {name}", list(found)), render_root_json(list(found)))


def _per_cell_pages(pages: Pages, channel: str, projects: dict[str, list[IndexFile]]) -> list[str]:
    """``simple/<channel>/torch-2.13.0+cpu/`` and ``torch-2.13.0+cpu.html``: the cell wheels of one variant, as
    the PyG wheel index has them (``pip install NAME -f .../torch-2.13.0+cpu.html``)."""
    by_variant: dict[str, dict[str, list[IndexFile]]] = defaultdict(lambda: defaultdict(list))
    for project, files in projects.items():
        for f in files:
            for variant in f.variants:
                by_variant[variant][project].append(f)
    for variant, found in by_variant.items():
        _write_index(pages, channel, variant, found)
        every = [f for files in found.values() for f in files]
        pages.put(f"simple/{channel}/{variant}.html", render_find_links(channel, variant, every), HTML_TYPE)
    return sorted(by_variant)
