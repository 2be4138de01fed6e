"""Load CloudFormation/SAM YAML: short-form intrinsics (!Ref, !Sub, ...) become their long JSON form."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

_SCALAR_LIST_FUNCTIONS = {"GetAtt"}  # `!GetAtt A.B` is the one scalar that becomes a list


# libyaml's parser where PyYAML's wheel carries it: the same documents, about six times faster than the pure
# Python one, and every test that deploys the template parses it
_SAFE: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class CfnLoader(_SAFE):  # type: ignore[valid-type,misc]
    """SafeLoader plus intrinsic tags; dates stay strings (`AWSTemplateFormatVersion: 2010-09-09`)."""


# Drop the timestamp resolver: CloudFormation never turns a scalar into a date.
CfnLoader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _intrinsic(loader: yaml.Loader, tag_suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = tag_suffix
    key = "Ref" if name == "Ref" else "Condition" if name == "Condition" else f"Fn::{name}"
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
        if name in _SCALAR_LIST_FUNCTIONS:
            resource, _, attribute = str(value).partition(".")
            value = [resource, attribute]
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    return {key: value}


CfnLoader.add_multi_constructor("!", _intrinsic)


def load_template(path: Path) -> dict[str, Any]:
    """Read a template (YAML or JSON, JSON being YAML) into a plain dict."""
    with path.open(encoding="utf-8") as handle:
        data = yaml.load(handle, Loader=CfnLoader)  # noqa: S506 (CfnLoader is a SafeLoader)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a template (top level is {type(data).__name__})")
    return data
