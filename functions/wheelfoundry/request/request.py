"""Parse a raw build request into typed form, reporting every problem at once.

Order: preset expansion -> JSON Schema (shape, patterns, unknown keys) -> defaults from the
schema -> catalog checks (meaning). Catalog checks skip fields that already failed the schema,
so each mistake is reported once, and all of them in one error.
"""

from __future__ import annotations

import copy
import difflib
import json
import math
from collections.abc import Iterator, Mapping
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError, best_match

from wheelfoundry.catalog.catalog import Catalog, load_catalog
from wheelfoundry.config import FarmConfig, load_config
from wheelfoundry.errors import Issue, RequestInvalid
from wheelfoundry.request import images, semantics
from wheelfoundry.request.model import Request
from wheelfoundry.request.presets import expand_preset
from wheelfoundry.request.publish_targets import parse_target
from wheelfoundry.request.request_typed import build, gpu_test_issues, run_python


@cache
def load_schema() -> dict[str, Any]:
    text = resources.files("wheelfoundry").joinpath("data/request.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def format_path(parts: Iterator[Any] | list[Any] | tuple[Any, ...]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _short(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _issue_from(error: ValidationError) -> Issue:
    """Turn one jsonschema error into an Issue a person can act on."""
    if error.validator in ("oneOf", "anyOf") and error.context:
        # Prefer the branch that matched the value's shape: errors inside it sit deeper in the instance.
        depth = len(error.absolute_path)
        inner = [e for e in error.context if len(e.absolute_path) > depth] or list(error.context)
        deeper = best_match(inner)
        if deeper.validator not in ("required",):
            error = deeper
    path = format_path(list(error.absolute_path))
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    value = error.instance
    kind = error.validator
    if kind == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extras = sorted(set(value) - set(allowed)) if isinstance(value, Mapping) else []
        key = extras[0] if extras else "?"
        hint = difflib.get_close_matches(key, allowed, n=1)
        where = f"{path}.{key}" if path else key
        message = f"unknown field {key!r}" + (f"; did you mean {hint[0]!r}?" if hint else "")
        return Issue(where, message, key, tuple(allowed))
    if kind == "enum":
        return Issue(path, f"{_short(value)} is not allowed", value, tuple(str(v) for v in error.validator_value))
    if kind == "const":
        return Issue(path, f"{_short(value)} is not allowed", value, (str(error.validator_value),))
    if kind in ("pattern", "not"):
        hint = schema.get("x-hint") or error.message
        return Issue(path, f"{_short(value)} is not a valid value: expected {hint}", value)
    if kind == "type":
        return Issue(path, f"{_short(value)} has the wrong type: expected {error.validator_value}", value)
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return Issue(path, f"{_short(value)} is out of range", value, (_range(schema),))
    if kind == "oneOf" and path.endswith("source"):
        return Issue(path, "give exactly one of 's3' or 'git'", value, ("s3", "git"))
    return Issue(path, error.message, value)


def _range(schema: Mapping[str, Any]) -> str:
    """``0.25 <= value <= 48``: a numeric field's bounds as the schema states them."""
    low = f"{schema['minimum']} <= " if "minimum" in schema else ""
    low = f"{schema['exclusiveMinimum']} < " if "exclusiveMinimum" in schema else low
    return f"{low}value" + (f" <= {schema['maximum']}" if "maximum" in schema else "")


def _deref(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    if "$ref" not in schema:
        return schema
    target: Any = root
    for part in schema["$ref"].removeprefix("#/").split("/"):
        target = target[part]
    return _deref({**target, **{k: v for k, v in schema.items() if k != "$ref"}}, root)


def _fill_defaults(instance: Any, schema: Mapping[str, Any], root: Mapping[str, Any]) -> Any:
    """Apply the schema's ``default`` keywords (jsonschema validates, it does not fill)."""
    schema = _deref(schema, root)
    if isinstance(instance, dict):
        for key, sub in schema.get("properties", {}).items():
            sub = _deref(sub, root)
            if key not in instance and "default" in sub:
                instance[key] = copy.deepcopy(sub["default"])
            if key in instance:
                instance[key] = _fill_defaults(instance[key], sub, root)
    elif isinstance(instance, list) and isinstance(schema.get("items"), Mapping):
        return [_fill_defaults(item, schema["items"], root) for item in instance]
    return instance


def _control_characters(value: Any, path: list[Any]) -> list[Issue]:
    """Python's ``$`` matches before a final newline, so patterns alone would let "2.5.1\\n" through."""
    if isinstance(value, str):
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            return [Issue(format_path(path), f"{_short(value)} contains control characters", value)]
        return []
    if isinstance(value, Mapping):
        return [i for k, v in value.items() for i in _control_characters(v, [*path, k])]
    if isinstance(value, list):
        return [i for n, v in enumerate(value) for i in _control_characters(v, [*path, n])]
    return []


MAX_REQUEST_BYTES = 256 * 1024  # Step Functions' own limit on an execution's input
MAX_DEPTH = 16  # the schema's deepest field is 4 levels down
MAX_NODES = 20_000
MAX_INT = 2**53  # beyond this JSON numbers stop being portable (RFC 8259 section 6)


def _number_issue(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and abs(value) > MAX_INT:
        return f"a number with {len(str(abs(value)))} digits is out of range"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    return None


def input_issues(raw: Any) -> list[Issue]:
    """What no request may hold, checked without recursion before anything else looks at it:
    nesting deeper than MAX_DEPTH, more than MAX_NODES values, huge or non-finite numbers, and
    strings that are not valid Unicode (lone surrogates from ``\\ud800`` escapes)."""
    stack: list[tuple[Any, int, str]] = [(raw, 0, "")]
    nodes = 0
    while stack:
        value, depth, path = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            return [Issue("", f"the request holds more than {MAX_NODES} values")]
        if depth > MAX_DEPTH:
            return [Issue(path, f"nested deeper than {MAX_DEPTH} levels")]
        if isinstance(value, Mapping):
            stack += [(v, depth + 1, f"{path}.{k}" if path else str(k)) for k, v in value.items()]
            for key in value:
                if not isinstance(key, str) or _surrogate(key):
                    return [Issue(path, f"the key {key!r} is not valid Unicode text")]
        elif isinstance(value, list | tuple):
            stack += [(v, depth + 1, f"{path}[{n}]") for n, v in enumerate(value)]
        elif isinstance(value, str):
            if _surrogate(value):
                return [Issue(path, "the text is not valid Unicode (a lone surrogate)")]
        elif (problem := _number_issue(value)) is not None:
            return [Issue(path, problem)]
    return []


def _surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_request(data: bytes, where: str) -> Any:
    """Parse a request file's bytes. Whatever the parser cannot handle (not UTF-8, not JSON, nesting
    past the interpreter's stack, integers past Python's digit limit, NaN) is one RequestInvalid issue."""
    if len(data) > MAX_REQUEST_BYTES:
        limit = f"the file has {len(data)} bytes; a request holds at most {MAX_REQUEST_BYTES}"
        raise RequestInvalid([Issue(where, limit)])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1]
        raise RequestInvalid([Issue(where, f"not UTF-8 text (byte {exc.start}: {bad!r})")]) from None
    try:
        raw = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise RequestInvalid([Issue(where, "not valid JSON: nested too deeply to parse")]) from None
    except ValueError as exc:  # JSONDecodeError, and int() past sys.get_int_max_str_digits()
        message = " ".join(str(exc).split())[:200]
        raise RequestInvalid([Issue(where, f"not valid JSON: {message}")]) from None
    issues = input_issues(raw)
    if issues:
        raise RequestInvalid([Issue(where + (f": {i.path}" if i.path else ""), i.message) for i in issues])
    return raw


def shape_issues(raw: Any, validator: jsonschema.protocols.Validator | None = None) -> list[Issue]:
    """Every schema problem of ``raw`` as an Issue (``validator``: another schema's, e.g. a subscription's)."""
    validator = validator or jsonschema.Draft202012Validator(load_schema())
    errors = sorted(validator.iter_errors(raw), key=lambda e: list(e.absolute_path))
    return _control_characters(raw, []) + [_issue_from(e) for e in errors]


def parse_request(raw: Any, catalog: Catalog | None = None, config: FarmConfig | None = None) -> Request:
    """Validate ``raw`` and return the typed request, or raise RequestInvalid with every issue."""
    catalog = catalog or load_catalog()
    config = config or load_config()
    if not isinstance(raw, Mapping):
        raise RequestInvalid([Issue("", f"the request must be a JSON object, not {type(raw).__name__}", raw)])
    limits = input_issues(raw)
    if limits:  # before the schema: jsonschema and the checks below recurse
        raise RequestInvalid(limits)
    raw, preset_issues = expand_preset(dict(raw))
    issues = preset_issues + shape_issues(raw)
    filled = copy.deepcopy(raw)
    schema = load_schema()
    branch = "extension" if filled.get("framework") == "extension" else "pytorch"
    filled = _fill_defaults(filled, schema["$defs"][branch], schema)
    bad_paths = {issue.path for issue in issues}
    issues += semantics.check(filled, catalog, config, skip=bad_paths)
    torches = filled.get("torch")  # an extension's torch list; anything else is the schema's to report
    torch_count = len(torches) if isinstance(torches, list) and torches else 1
    issues += images.check(filled, catalog, bad_paths, run_python(filled, catalog), torch_count)
    issues += gpu_test_issues(filled.get("options"), config)
    if isinstance(filled.get("options"), Mapping) and "options.publish" not in bad_paths:
        issues += parse_target(filled["options"].get("publish"))[1]
    if issues:
        unique = {(i.path, i.message): i for i in issues}  # one mistake can trip two schema keywords
        raise RequestInvalid(unique.values())
    return build(filled, catalog, config)
