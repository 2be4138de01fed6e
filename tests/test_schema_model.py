"""The request schema and the typed dataclasses cannot drift apart."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, get_args, get_origin

import pytest

from wheelfoundry.request import model
from wheelfoundry.request.request import load_schema

# Schema-only keys, each with the reason it has no dataclass field.
SCHEMA_ONLY = {"preset"}  # expanded into the request before it is typed
# Dataclass-only fields, each with the reason it has no schema key.
MODEL_ONLY = {"wall_target"}  # options.max_wall_hours as the request gave it (None: not given), which its default hides


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    schema = load_schema()
    while "$ref" in node:
        target: Any = schema
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _object_properties(node: dict[str, Any]) -> dict[str, Any]:
    node = _resolve(node)
    if "oneOf" in node:  # a package: a bare name or an object
        node = next(_resolve(n) for n in node["oneOf"] if _resolve(n).get("type") == "object")
    return {k: _resolve(v) for k, v in node["properties"].items()}


def _defs(name: str) -> dict[str, Any]:
    return load_schema()["$defs"][name]  # type: ignore[no-any-return]


PAIRS = [
    ("pytorch", model.BuildRequest),
    ("extension", model.ExtensionRequest),
    ("target", model.TargetSpec),
    ("options", model.Options),
    ("package", model.PackageSpec),
    ("image", model.RuntimeImage),
]


@pytest.mark.parametrize(("definition", "cls"), PAIRS, ids=[p[0] for p in PAIRS])
def test_same_fields(definition: str, cls: type) -> None:
    props = set(_object_properties(_defs(definition))) - SCHEMA_ONLY
    fields = {f.name for f in dataclasses.fields(cls)} - MODEL_ONLY
    assert props == fields


def test_extension_source_fields() -> None:
    props = set(_object_properties(_defs("extension"))["source"]["properties"])
    assert props == {f.name for f in dataclasses.fields(model.ExtensionSource)}


@pytest.mark.parametrize(
    ("definition", "cls"), [("target", model.TargetSpec), ("options", model.Options), ("image", model.RuntimeImage)]
)
def test_same_defaults(definition: str, cls: type) -> None:
    props = _object_properties(_defs(definition))
    for f in dataclasses.fields(cls):
        if "default" in props[f.name]:
            default = props[f.name]["default"]
            assert f.default == (tuple(default) if isinstance(default, list) else default), f.name


def _literal_values(cls: type, name: str) -> set[Any]:
    hints = typing.get_type_hints(cls)
    hint = hints[name]
    if get_origin(hint) is tuple:
        hint = get_args(hint)[0]
    return set(get_args(hint))


@pytest.mark.parametrize(
    ("cls", "field", "path"),
    [
        (model.TargetSpec, "platform", ("target", "platform")),
        (model.TargetSpec, "accelerator", ("target", "accelerator")),
        (model.Options, "executor", ("options", "executor")),
        (model.ExtensionRequest, "platforms", ("extension", "platforms")),
        (model.ExtensionRequest, "torch_index", ("extension", "torch_index")),
        (model.ExtensionRequest, "layout", ("extension", "layout")),
        (model.RuntimeImage, "base", ("image", "base")),
    ],
)
def test_enums_match_literals(cls: type, field: str, path: tuple[str, str]) -> None:
    node = _object_properties(_defs(path[0]))[path[1]]
    if node.get("type") == "array":
        node = _resolve(node["items"])
    assert set(node["enum"]) == _literal_values(cls, field)


def test_required_extension_fields_have_no_dataclass_default() -> None:
    required = set(_defs("extension")["required"]) - {"framework"}
    defaults = {
        f.name
        for f in dataclasses.fields(model.ExtensionRequest)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    }
    assert not required & defaults
