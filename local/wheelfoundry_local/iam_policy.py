"""A small offline IAM policy evaluator for the subset of IAM this stack uses.

The embedded AWS enforces it on S3 requests signed with assumed-role credentials
(``iam_enforce.py``), and the tests evaluate the template's roles with it (tests/test_iam_matrix.py);
tests/test_iam_eval.py checks it against the examples of the IAM User Guide.

Subset: Effect Allow/Deny; Action/NotAction and Resource/NotResource with * and ? wildcards (actions
case-insensitive); policy variables ${key} (and ${*} ${?} ${$}) in Resource and condition values;
condition operators StringEquals/StringNotEquals/StringLike/StringNotLike/ArnEquals/ArnLike/ArnNotEquals/
ArnNotLike/Bool
(each also ...IfExists), several values = OR, several keys and operators = AND. Evaluation within one
account: an explicit Deny in any policy wins; otherwise the identity policies must allow, and when a
session policy is given it must allow too (the effective permissions are the intersection).
Not modelled: resource-based policies, permissions boundaries, SCPs, ForAnyValue/ForAllValues.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Policy = Mapping[str, Any]


@dataclass(frozen=True)
class Request:
    action: str
    resource: str
    context: Mapping[str, str] = field(default_factory=dict)


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _glob(pattern: str, value: str, case_sensitive: bool = True) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, 0 if case_sensitive else re.IGNORECASE | re.DOTALL) is not None


_VARIABLE = re.compile(r"\$\{([^}]+)\}")
_ESCAPES = {"*": "\0STAR\0", "?": "\0QMARK\0", "$": "$"}


def substitute(text: str, context: Mapping[str, str]) -> str | None:
    """Replace ${key} by the request's value; None when a key has no value (the statement cannot match).
    ${*} and ${?} stand for literal * and ? (kept out of wildcard matching), ${$} for $."""

    missing = False

    def one(match: re.Match[str]) -> str:
        nonlocal missing
        key = match.group(1)
        if key in _ESCAPES:
            return _ESCAPES[key]
        key, _, default = key.partition(", ")
        if key in context:
            return context[key]
        if default:
            return default.strip("'")
        missing = True
        return ""

    out = _VARIABLE.sub(one, text)
    return None if missing else out


def _literal_match(pattern: str, value: str, case_sensitive: bool = True) -> bool:
    """Wildcard match where the ${*}/${?} placeholders only match themselves."""
    parts = re.split("(\0STAR\0|\0QMARK\0)", pattern)
    regex = ""
    for part in parts:
        if part == "\0STAR\0":
            regex += re.escape("*")
        elif part == "\0QMARK\0":
            regex += re.escape("?")
        else:
            regex += "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in part)
    return re.fullmatch(regex, value, re.DOTALL | (0 if case_sensitive else re.IGNORECASE)) is not None


def _condition(operator: str, key: str, expected: Any, context: Mapping[str, str]) -> bool:
    if_exists = operator.endswith("IfExists")
    base = operator.removesuffix("IfExists")
    # Condition key names are not case-sensitive (AWS:SourceArn, aws:SourceArn); their values are.
    found = next((k for k in context if k.lower() == key.lower()), None)
    if found is None:
        return if_exists or base in ("StringNotEquals", "StringNotLike", "ArnNotEquals", "ArnNotLike")
    actual = context[found]
    values = [substitute(str(v).lower() if isinstance(v, bool) else str(v), context) for v in _as_list(expected)]
    present = [v for v in values if v is not None]
    if base == "StringEquals" or base == "ArnEquals":
        return actual in present
    if base == "StringNotEquals":
        return actual not in present
    if base in ("StringLike", "ArnLike"):
        return any(_literal_match(v, actual) for v in present)
    if base in ("StringNotLike", "ArnNotEquals", "ArnNotLike"):
        return not any(_literal_match(v, actual) for v in present)
    if base == "Bool":
        return actual.lower() in [v.lower() for v in present]
    raise NotImplementedError(f"condition operator {operator} is outside the evaluator's subset")


def statement_matches(statement: Mapping[str, Any], request: Request) -> bool:
    if "Action" in statement:
        if not any(_glob(a, request.action, case_sensitive=False) for a in _as_list(statement["Action"])):
            return False
    elif any(_glob(a, request.action, case_sensitive=False) for a in _as_list(statement["NotAction"])):
        return False
    key = "Resource" if "Resource" in statement else "NotResource"
    patterns = [substitute(r, request.context) for r in _as_list(statement[key])]
    hit = any(p is not None and _literal_match(p, request.resource) for p in patterns)
    if hit != (key == "Resource"):
        return False
    for operator, keys in (statement.get("Condition") or {}).items():
        for cond_key, expected in keys.items():
            if not _condition(operator, cond_key, expected, request.context):
                return False
    return True


def _statements(policies: Iterable[Policy]) -> list[Mapping[str, Any]]:
    return [s for p in policies for s in _as_list(p.get("Statement", []))]


def decide(request: Request, identity: Sequence[Policy], session: Sequence[Policy] = ()) -> str:
    """'Allow', 'ExplicitDeny' or 'ImplicitDeny' for one request of one principal."""
    statements = _statements(identity) + _statements(session)
    if any(s["Effect"] == "Deny" and statement_matches(s, request) for s in statements):
        return "ExplicitDeny"
    allowed = any(s["Effect"] == "Allow" and statement_matches(s, request) for s in _statements(identity))
    if allowed and session:
        allowed = any(s["Effect"] == "Allow" and statement_matches(s, request) for s in _statements(session))
    return "Allow" if allowed else "ImplicitDeny"


def allowed(request: Request, identity: Sequence[Policy], session: Sequence[Policy] = ()) -> bool:
    return decide(request, identity, session) == "Allow"
