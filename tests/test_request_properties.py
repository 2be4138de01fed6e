"""Property-based: the validator never crashes, and no shell metacharacter reaches a build host."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.errors import GuardrailExceeded, RequestInvalid
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
FIELDS = [
    "framework",
    "version",
    "python",
    "targets",
    "packages",
    "options",
    "channel",
    "preset",
    "name",
    "source",
    "torch",
    "cuda",
    "platforms",
    "arch_list",
]
requestish = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6)

BASE: dict[str, Any] = {
    "version": "2.5.1",
    "python": ["3.11"],
    "targets": [
        {
            "platform": "x86_64",
            "accelerator": "cuda",
            "cuda": "12.4",
            "arch_list": "8.0;9.0",
            "instance_type": "m7i.8xlarge",
        }
    ],
    "packages": ["torch", {"name": "torchvision", "ref": "v0.20.1"}],
    "channel": "release",
}
EXT_BASE: dict[str, Any] = {
    "framework": "extension",
    "name": "ext",
    "source": {"git": "https://example.com/a/b.git", "ref": "main", "subdirectory": "pkg"},
    "torch": ["2.13"],
    "cuda": ["cpu", "13.0"],
    "python": ["3.11"],
    "arch_list": "8.0",
}
# Where an untrusted string sits in a request, as (base request, path to the string).
STRING_SLOTS = [
    (BASE, ["version"]),
    (BASE, ["python", 0]),
    (BASE, ["targets", 0, "cuda"]),
    (BASE, ["targets", 0, "arch_list"]),
    (BASE, ["targets", 0, "instance_type"]),
    (BASE, ["packages", 1, "ref"]),
    (BASE, ["channel"]),
    (EXT_BASE, ["name"]),
    (EXT_BASE, ["source", "git"]),
    (EXT_BASE, ["source", "ref"]),
    (EXT_BASE, ["source", "subdirectory"]),
    (EXT_BASE, ["torch", 0]),
    (EXT_BASE, ["cuda", 0]),
    (EXT_BASE, ["arch_list"]),
]
METACHARACTERS = [*list(";|&$`<>(){}[]*?!#~'\"\\\n\t "), "$(id)", "`id`", "..", "--upload-pack=x", "%0a"]


def outcome(raw: Any) -> str:
    try:
        request = parse_request(raw)
    except RequestInvalid as exc:
        assert exc.issues, "an error must say what is wrong"
        for issue in exc.issues:
            assert str(issue)  # every issue renders
        return "invalid"
    try:
        plan = plan_request(request, load_catalog(), load_config())
    except GuardrailExceeded:
        return "guardrail"
    json.dumps([job.to_dict() for job in plan.jobs])  # the contract is always serialisable
    return "plan"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requestish)
def test_any_json_object_gives_a_plan_or_a_validation_error(raw: dict[str, Any]) -> None:
    assert outcome(raw) in ("plan", "invalid", "guardrail")


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_any_json_value_at_all(raw: Any) -> None:
    assert outcome(raw) in ("plan", "invalid", "guardrail")


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(STRING_SLOTS), json_values)
def test_any_value_in_any_slot(slot: tuple[dict[str, Any], list[Any]], value: Any) -> None:
    base, path = slot
    raw = copy.deepcopy(base)
    target = raw
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    assert outcome(raw) in ("plan", "invalid", "guardrail")


def _with(base: dict[str, Any], path: list[Any], value: str) -> dict[str, Any]:
    raw = copy.deepcopy(base)
    target = raw
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return raw


def _get(base: dict[str, Any], path: list[Any]) -> Any:
    for part in path:
        base = base[part]
    return base


@pytest.mark.parametrize("slot", STRING_SLOTS, ids=lambda s: ".".join(map(str, s[1])))
@pytest.mark.parametrize("meta", METACHARACTERS, ids=repr)
def test_hostile_strings_are_rejected_at_their_field(slot: tuple[dict[str, Any], list[Any]], meta: str) -> None:
    base, path = slot
    assert outcome(base) == "plan"  # the slot's base request is valid: the rejection is due to `meta`
    original = str(_get(base, path))
    for hostile in (original + meta, meta + original, original[:1] + meta + original[1:]):
        with pytest.raises(RequestInvalid) as caught:
            parse_request(_with(base, path, hostile))
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
        assert any(issue.path == where for issue in caught.value.issues), (hostile, caught.value.issues)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(STRING_SLOTS), st.text(min_size=1, max_size=30))
def test_accepted_strings_never_carry_shell_metacharacters(slot: tuple[dict[str, Any], list[Any]], text: str) -> None:
    base, path = slot
    raw = _with(base, path, text)
    try:
        parse_request(raw)
    except RequestInvalid:
        return
    assert not set(text) & set(";|&$`<>(){}[]*?!#~'\"\\ \n\t\r"), f"{text!r} was accepted at {path}"


@pytest.mark.parametrize("torch", [1, "2.5.1", {"a": 1}, None, []])
def test_a_torch_field_of_any_type_is_a_validation_error_not_a_crash(torch: object) -> None:
    # hypothesis found {"torch": 1} crashing the image check's count of torch versions
    assert outcome({"torch": torch}) in ("invalid", "plan", "guardrail")
    assert outcome({"framework": "extension", "torch": torch, "source": "s3://b/k.tar.gz"}) in ("invalid", "plan")
