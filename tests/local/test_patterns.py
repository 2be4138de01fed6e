"""EventBridge pattern matching, table-driven: each row is (pattern, event, expected)."""

from __future__ import annotations

from typing import Any

import pytest

from wheelfoundry_local.patterns import PatternError, matches

SSM_EVENT = {
    "version": "0",
    "source": "aws.ssm",
    "detail-type": "EC2 Command Invocation Status-change Notification",
    "resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-0abc"],
    "detail": {
        "command-id": "c1",
        "document-name": "wf-Build-1",
        "instance-id": "i-0abc",
        "status": "Failed",
        "attempt": 3,
        "spot": True,
        "note": None,
        "tags": ["a", "b"],
        "nested": {"deep": {"x": "y"}},
    },
}

CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("exact source", {"source": ["aws.ssm"]}, True),
    ("other source", {"source": ["aws.ec2"]}, False),
    ("any of several values", {"source": ["aws.ec2", "aws.ssm"]}, True),
    ("nested field", {"detail": {"status": ["Failed", "TimedOut"]}}, True),
    ("nested field mismatch", {"detail": {"status": ["Success"]}}, False),
    ("all keys must match", {"source": ["aws.ssm"], "detail": {"status": ["Success"]}}, False),
    ("deeply nested", {"detail": {"nested": {"deep": {"x": ["y"]}}}}, True),
    ("case sensitive", {"detail": {"status": ["failed"]}}, False),
    ("equals-ignore-case", {"detail": {"status": [{"equals-ignore-case": "FAILED"}]}}, True),
    ("prefix", {"detail": {"document-name": [{"prefix": "wf-"}]}}, True),
    ("prefix mismatch", {"detail": {"document-name": [{"prefix": "xx-"}]}}, False),
    ("suffix", {"detail": {"document-name": [{"suffix": "-1"}]}}, True),
    ("wildcard", {"detail": {"document-name": [{"wildcard": "wf-*-1"}]}}, True),
    ("anything-but value", {"detail": {"status": [{"anything-but": "Success"}]}}, True),
    ("anything-but excludes", {"detail": {"status": [{"anything-but": ["Failed", "Cancelled"]}]}}, False),
    ("anything-but prefix", {"detail": {"document-name": [{"anything-but": {"prefix": "wf-"}}]}}, False),
    ("anything-but needs the field", {"detail": {"missing": [{"anything-but": "x"}]}}, False),
    ("exists true", {"detail": {"command-id": [{"exists": True}]}}, True),
    ("exists true on absent", {"detail": {"missing": [{"exists": True}]}}, False),
    ("exists false on absent", {"detail": {"missing": [{"exists": False}]}}, True),
    ("exists false on present", {"detail": {"status": [{"exists": False}]}}, False),
    ("absent field, value list", {"detail": {"missing": ["x"]}}, False),
    ("absent parent object", {"nope": {"status": ["Failed"]}}, False),
    ("array in event: any element", {"detail": {"tags": ["b"]}}, True),
    ("array in event: none", {"detail": {"tags": ["c"]}}, False),
    ("resources array", {"resources": [{"prefix": "arn:aws:ec2:"}]}, True),
    ("number equality", {"detail": {"attempt": [3]}}, True),
    ("number vs string", {"detail": {"attempt": ["3"]}}, False),
    ("numeric range", {"detail": {"attempt": [{"numeric": [">", 2, "<=", 3]}]}}, True),
    ("numeric out of range", {"detail": {"attempt": [{"numeric": [">", 3]}]}}, False),
    ("boolean", {"detail": {"spot": [True]}}, True),
    ("boolean is not 1", {"detail": {"spot": [1]}}, False),
    ("null", {"detail": {"note": [None]}}, True),
    ("$or", {"$or": [{"source": ["aws.ec2"]}, {"detail": {"status": ["Failed"]}}]}, True),
    ("$or none", {"$or": [{"source": ["aws.ec2"]}, {"detail": {"status": ["Success"]}}]}, False),
    ("empty pattern never matches", {}, False),
]


@pytest.mark.parametrize(("name", "pattern", "expected"), CASES, ids=[c[0] for c in CASES])
def test_pattern(name: str, pattern: dict[str, Any], expected: bool) -> None:
    assert matches(pattern, SSM_EVENT) is expected


@pytest.mark.parametrize(
    "pattern",
    [
        {"source": "aws.ssm"},  # values must be in an array
        {"detail": {"status": [{"prefix": "a", "suffix": "b"}]}},
        {"detail": {"status": [{"bogus": 1}]}},
        {"detail": {"attempt": [{"numeric": [">"]}]}},
    ],
)
def test_malformed_patterns_are_rejected(pattern: dict[str, Any]) -> None:
    with pytest.raises(PatternError):
        matches(pattern, SSM_EVENT)
