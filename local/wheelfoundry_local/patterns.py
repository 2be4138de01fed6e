"""EventBridge event-pattern matching (the subset real rules use).

Semantics follow EventBridge (event-ruler): every key of the pattern must match; a list of
values matches if any value matches; an array in the event matches if any element matches;
a field absent from the event matches only `{"exists": false}`.

Supported: exact strings, numbers, booleans and null; nested objects; `prefix`, `suffix`,
`equals-ignore-case`, `wildcard`, `anything-but` (a value, a list, or a prefix/suffix), `exists`,
`numeric` (comparison pairs) and `$or`.
"""

from __future__ import annotations

import fnmatch
import operator
from collections.abc import Callable
from typing import Any

_MISSING = object()
_NUMERIC: dict[str, Callable[[float, float], bool]] = {
    "=": operator.eq,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


class PatternError(ValueError):
    """The pattern itself is malformed (EventBridge rejects it at PutRule)."""


def matches(pattern: dict[str, Any] | None, event: dict[str, Any]) -> bool:
    """Whether `event` (the full envelope: source, detail-type, detail, ...) matches `pattern`."""
    if not pattern:
        return False  # a rule without a pattern is a schedule rule; events never reach it
    return _match_object(pattern, event)


def _match_object(pattern: dict[str, Any], node: Any) -> bool:
    for key, expected in pattern.items():
        if key == "$or":
            if not isinstance(expected, list) or not any(_match_object(p, node) for p in expected):
                return False
            continue
        value = node.get(key, _MISSING) if isinstance(node, dict) else _MISSING
        if isinstance(expected, dict):
            candidates = value if isinstance(value, list) else [value]
            if not any(isinstance(c, dict) and _match_object(expected, c) for c in candidates):
                return False
        elif isinstance(expected, list):
            if not _match_values(expected, value):
                return False
        else:
            raise PatternError(f"pattern value for {key!r} must be an object or an array, not {expected!r}")
    return True


def _match_values(matchers: list[Any], value: Any) -> bool:
    if value is _MISSING:
        return any(isinstance(m, dict) and m.get("exists") is False for m in matchers)
    leaves = value if isinstance(value, list) else [value]
    return any(_match_one(m, leaf) for m in matchers for leaf in leaves)


def _same(expected: Any, leaf: Any) -> bool:
    if isinstance(expected, bool) or isinstance(leaf, bool) or expected is None or leaf is None:
        return expected is leaf or (expected == leaf and type(expected) is type(leaf))
    if isinstance(expected, int | float) and isinstance(leaf, int | float):
        return float(expected) == float(leaf)
    return isinstance(expected, str) and isinstance(leaf, str) and expected == leaf


def _match_one(matcher: Any, leaf: Any) -> bool:
    if not isinstance(matcher, dict):
        return _same(matcher, leaf)
    if len(matcher) != 1:
        raise PatternError(f"a content filter has exactly one key: {matcher!r}")
    ((name, arg),) = matcher.items()
    if name == "exists":
        return arg is True
    if name == "prefix":
        return _affix(arg, leaf, str.startswith)
    if name == "suffix":
        return _affix(arg, leaf, str.endswith)
    if name == "equals-ignore-case":
        return isinstance(leaf, str) and isinstance(arg, str) and leaf.casefold() == arg.casefold()
    if name == "wildcard":
        return isinstance(leaf, str) and fnmatch.fnmatchcase(leaf, str(arg).replace("[", "[[]"))
    if name == "anything-but":
        return not _anything_but_excludes(arg, leaf)
    if name == "numeric":
        return _numeric(arg, leaf)
    raise PatternError(f"unsupported content filter {name!r}")


def _affix(arg: Any, leaf: Any, test: Callable[[str, str], bool]) -> bool:
    if not isinstance(leaf, str):
        return False
    if isinstance(arg, dict) and set(arg) == {"equals-ignore-case"}:
        return test(leaf.casefold(), str(arg["equals-ignore-case"]).casefold())
    if not isinstance(arg, str):
        raise PatternError(f"prefix/suffix takes a string: {arg!r}")
    return test(leaf, arg)


def _anything_but_excludes(arg: Any, leaf: Any) -> bool:
    if isinstance(arg, dict):
        return _match_one(arg, leaf)  # {"anything-but": {"prefix": "x"}} and friends
    excluded = arg if isinstance(arg, list) else [arg]
    return any(_same(e, leaf) for e in excluded)


def _numeric(arg: Any, leaf: Any) -> bool:
    if not isinstance(arg, list) or len(arg) % 2 or not arg:
        raise PatternError(f"numeric takes operator/value pairs: {arg!r}")
    if isinstance(leaf, bool) or not isinstance(leaf, int | float):
        return False
    for op, bound in zip(arg[::2], arg[1::2], strict=True):
        if op not in _NUMERIC:
            raise PatternError(f"numeric operator {op!r}")
        if not _NUMERIC[op](float(leaf), float(bound)):
            return False
    return True
