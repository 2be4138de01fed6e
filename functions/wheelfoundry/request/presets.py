"""Named requests (``data/presets/<name>.json``), usable wherever a request is."""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from wheelfoundry.errors import Issue


def preset_names() -> tuple[str, ...]:
    folder = resources.files("wheelfoundry").joinpath("data/presets")
    return tuple(sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json")))


def load_preset(name: str) -> dict[str, Any]:
    if name not in preset_names():
        raise KeyError(name)
    text = resources.files("wheelfoundry").joinpath(f"data/presets/{name}.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def expand_preset(raw: dict[str, Any]) -> tuple[dict[str, Any], list[Issue]]:
    """``{"preset": "nightly", ...overrides}`` -> the preset with the overrides applied."""
    name = raw.get("preset")
    if name is None:
        return raw, []
    rest = {k: v for k, v in raw.items() if k != "preset"}
    if not isinstance(name, str) or name not in preset_names():
        return rest, [Issue("preset", f"unknown preset {name!r}", name, preset_names())]
    return _merge(load_preset(name), rest), []
