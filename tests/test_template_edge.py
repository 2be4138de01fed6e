"""The public channels' distribution in the template (issue 65): its URL outlives the stack, whatever it
needs to keep serving is retained with it, and what it may not read is a 404 without more privilege."""

from __future__ import annotations

import json
from typing import Any

from tests.helpers import all_states, resources
from wheelfoundry.publishing.edge import NOT_FOUND, SITE_ROOT

RETAIN = {"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"}


def _named(node: Any) -> set[str]:
    """The logical ids a template value refers to (Ref, Fn::GetAtt, and ${Name} or ${Name.Attr} in Fn::Sub)."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Ref" and isinstance(value, str):
                found.add(value)
            elif key == "Fn::GetAtt":
                found.add(value[0] if isinstance(value, list) else str(value).split(".")[0])
            elif key == "Fn::Sub":
                text = value[0] if isinstance(value, list) else value
                found |= {part.split("}")[0].split(".")[0] for part in str(text).split("${")[1:]}
            found |= _named(value)
    elif isinstance(node, list):
        for value in node:
            found |= _named(value)
    return found


def test_the_distribution_and_all_it_serves_with_outlive_the_stack() -> None:
    everything = resources()
    needed = {"EdgeDistribution"}
    while True:  # what the distribution names, and what those name, among the stack's resources
        more = {n for name in needed for n in _named(everything[name]["Properties"]) if n in everything}
        if more <= needed:
            break
        needed |= more
    assert {"EdgeOriginAccessControl", "EdgeIndexFunction", "EdgeLogBucket", "WheelBucket"} <= needed
    # And the policies without which the retained buckets would serve nothing, or accept plain HTTP.
    needed |= {"WheelBucketPolicy", "EdgeLogBucketPolicy"}
    for name in sorted(needed):
        kept = {k: everything[name].get(k) for k in RETAIN}
        assert kept == RETAIN, f"{name}: {kept}; the public URL must outlive the stack (issue 65)"


def test_what_is_retained_and_named_gets_a_name_a_new_stack_of_that_name_can_take_again() -> None:
    oac = resources()["EdgeOriginAccessControl"]["Properties"]["OriginAccessControlConfig"]["Name"]
    function = resources()["EdgeIndexFunction"]["Properties"]["Name"]
    for name in (oac, function):
        assert "AWS::StackId" in json.dumps(name), name


def test_whatever_the_edge_may_not_read_is_a_404_with_a_page_it_may_read() -> None:
    config = resources()["EdgeDistribution"]["Properties"]["DistributionConfig"]
    errors = {e["ErrorCode"]: e for e in config["CustomErrorResponses"]}
    for code in (403, 404):
        assert errors[code]["ResponseCode"] == 404 and errors[code]["ResponsePagePath"] == f"/{NOT_FOUND}", code
        assert errors[code]["ErrorCachingMinTTL"] <= 60, code  # a publish invalidates misses; still brief
    statements = resources()["WheelBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    edge = next(
        s["Fn::If"][1] for s in statements if "Fn::If" in s and s["Fn::If"][1]["Sid"] == "EdgeReadsPublicChannels"
    )
    granted = json.dumps(edge["Resource"])
    assert f"/{NOT_FOUND}" in granted and f"/{SITE_ROOT}" in granted
    # The 404 comes from the mapping, not from letting the distribution list the bucket.
    for statement in statements:
        body = statement["Fn::If"][1] if "Fn::If" in statement else statement
        principal = json.dumps(body.get("Principal"))
        if "cloudfront" in principal and body["Effect"] == "Allow":
            assert body["Action"] == "s3:GetObject", body


def test_the_same_function_picks_the_page_and_marks_it_vary_accept() -> None:
    behavior = resources()["EdgeDistribution"]["Properties"]["DistributionConfig"]["DefaultCacheBehavior"]
    events = {a["EventType"]: a["FunctionARN"] for a in behavior["FunctionAssociations"]}
    assert (
        set(events) == {"viewer-request", "viewer-response"} and events["viewer-request"] == events["viewer-response"]
    )


def test_a_failed_invalidation_is_retried_by_the_state_machine() -> None:
    retries = [r for r in all_states()["PublishIndex"]["Retry"] if "EdgeInvalidationFailed" in r["ErrorEquals"]]
    assert retries and retries[0]["MaxAttempts"] >= 3, all_states()["PublishIndex"]["Retry"]
