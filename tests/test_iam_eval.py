"""A small offline IAM policy evaluator for the subset of IAM this stack uses, and its tests against
the examples of the IAM User Guide (policy evaluation logic, policy variables, condition operators,
session policies).

Subset: Effect Allow/Deny; Action/NotAction and Resource/NotResource with * and ? wildcards (actions
case-insensitive); policy variables ${key} (and ${*} ${?} ${$}) in Resource and condition values;
condition operators StringEquals/StringNotEquals/StringLike/StringNotLike/ArnEquals/ArnLike/Bool
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
    if key not in context:
        return if_exists or base in ("StringNotEquals", "StringNotLike")
    actual = context[key]
    values = [substitute(str(v).lower() if isinstance(v, bool) else str(v), context) for v in _as_list(expected)]
    present = [v for v in values if v is not None]
    if base == "StringEquals" or base == "ArnEquals":
        return actual in present
    if base == "StringNotEquals":
        return actual not in present
    if base in ("StringLike", "ArnLike"):
        return any(_literal_match(v, actual) for v in present)
    if base == "StringNotLike":
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


# --- tests: examples of the IAM User Guide ---------------------------------------------------------
# reference_policies_evaluation-logic.html, reference_policies_variables.html,
# reference_policies_elements_condition_operators.html, access_policies.html#policies_session

MARKETING = {  # reference_policies_variables.html, "Introduction"
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": ["arn:aws:s3:::amzn-s3-demo-bucket"],
            "Condition": {"StringLike": {"s3:prefix": ["marketing/*"]}},
        },
        {
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject"],
            "Resource": ["arn:aws:s3:::amzn-s3-demo-bucket/marketing/*"],
        },
    ],
}
PER_USER = {  # reference_policies_variables.html, "Using variables in policies" (${aws:username})
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": ["arn:aws:s3:::amzn-s3-demo-bucket"],
            "Condition": {"StringLike": {"s3:prefix": ["${aws:username}/*"]}},
        },
        {
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject"],
            "Resource": ["arn:aws:s3:::amzn-s3-demo-bucket/${aws:username}/*"],
        },
    ],
}


def test_policy_variables_scope_each_user_to_their_prefix() -> None:
    david = {"aws:username": "David"}
    assert allowed(Request("s3:PutObject", "arn:aws:s3:::amzn-s3-demo-bucket/David/notes.txt", david), [PER_USER])
    assert not allowed(Request("s3:PutObject", "arn:aws:s3:::amzn-s3-demo-bucket/Mary/notes.txt", david), [PER_USER])
    list_own = Request("s3:ListBucket", "arn:aws:s3:::amzn-s3-demo-bucket", {**david, "s3:prefix": "David/"})
    assert allowed(list_own, [PER_USER])
    # No value for the variable (a role has no aws:username): the statement does not apply.
    assert not allowed(Request("s3:PutObject", "arn:aws:s3:::amzn-s3-demo-bucket/David/x", {}), [PER_USER])


def test_wildcards_and_string_like_prefix_condition() -> None:
    assert allowed(Request("s3:GetObject", "arn:aws:s3:::amzn-s3-demo-bucket/marketing/a/b.pdf"), [MARKETING])
    assert allowed(
        Request("S3:getobject", "arn:aws:s3:::amzn-s3-demo-bucket/marketing/x"), [MARKETING]
    )  # actions: any case
    assert not allowed(
        Request("s3:GetObject", "arn:aws:s3:::amzn-s3-demo-bucket/Marketing/x"), [MARKETING]
    )  # ARNs: exact case
    assert not allowed(Request("s3:DeleteObject", "arn:aws:s3:::amzn-s3-demo-bucket/marketing/x"), [MARKETING])
    bucket = "arn:aws:s3:::amzn-s3-demo-bucket"
    assert allowed(Request("s3:ListBucket", bucket, {"s3:prefix": "marketing/2024/"}), [MARKETING])
    assert not allowed(Request("s3:ListBucket", bucket, {"s3:prefix": "finance/"}), [MARKETING])
    assert not allowed(Request("s3:ListBucket", bucket, {}), [MARKETING])  # key absent: condition false


def test_explicit_deny_overrides_allow_and_default_is_deny() -> None:
    # reference_policies_evaluation-logic.html: "An explicit deny in any policy overrides any allows."
    deny = {
        "Statement": [
            {
                "Effect": "Deny",
                "Action": "s3:*",
                "Resource": "*",
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ]
    }
    request = Request("s3:GetObject", "arn:aws:s3:::amzn-s3-demo-bucket/marketing/x", {"aws:SecureTransport": "false"})
    assert decide(request, [MARKETING, deny]) == "ExplicitDeny"
    assert (
        decide(Request(request.action, request.resource, {"aws:SecureTransport": "true"}), [MARKETING, deny]) == "Allow"
    )
    assert decide(Request("ec2:RunInstances", "*"), [MARKETING]) == "ImplicitDeny"


def test_not_resource_deny_denies_everything_else() -> None:
    # reference_policies_elements_notresource.html: Deny with NotResource denies all but the listed resources.
    policy = {
        "Statement": [
            {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
            {
                "Effect": "Deny",
                "Action": "s3:*",
                "NotResource": ["arn:aws:s3:::HRBucket/Payroll", "arn:aws:s3:::HRBucket/Payroll/*"],
            },
        ]
    }
    assert allowed(Request("s3:GetObject", "arn:aws:s3:::HRBucket/Payroll/june.csv"), [policy])
    assert decide(Request("s3:GetObject", "arn:aws:s3:::HRBucket/Other/x"), [policy]) == "ExplicitDeny"


def test_session_policy_only_narrows_the_role() -> None:
    # access_policies.html#policies_session: "The resulting session's permissions are the intersection of
    # the role's identity-based policy and the session policies." A session policy cannot grant more.
    session = {
        "Statement": [
            {"Effect": "Allow", "Action": "s3:*", "Resource": "arn:aws:s3:::amzn-s3-demo-bucket/marketing/2024/*"}
        ]
    }
    inside = Request("s3:PutObject", "arn:aws:s3:::amzn-s3-demo-bucket/marketing/2024/a")
    outside = Request("s3:PutObject", "arn:aws:s3:::amzn-s3-demo-bucket/marketing/2023/a")
    assert allowed(inside, [MARKETING], [session]) and allowed(outside, [MARKETING])
    assert not allowed(outside, [MARKETING], [session])
    assert not allowed(Request("s3:DeleteObject", inside.resource), [MARKETING], [session])  # the role never allowed it


def test_string_not_equals_and_if_exists() -> None:
    policy = {
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "ec2:*",
                "Resource": "*",
                "Condition": {"StringEqualsIfExists": {"ec2:InstanceType": ["t3.micro"]}},
            }
        ]
    }
    assert allowed(Request("ec2:RunInstances", "*", {"ec2:InstanceType": "t3.micro"}), [policy])
    assert not allowed(Request("ec2:RunInstances", "*", {"ec2:InstanceType": "p5.48xlarge"}), [policy])
    assert allowed(Request("ec2:DescribeInstances", "*"), [policy])  # ...IfExists: absent key matches
    literal = {"Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/${*}"}]}
    assert allowed(Request("s3:GetObject", "arn:aws:s3:::b/*"), [literal])
    assert not allowed(Request("s3:GetObject", "arn:aws:s3:::b/anything"), [literal])
