"""Every kind of invalid request gets the right message: field path, bad value, what is allowed."""

from __future__ import annotations

from typing import Any

import pytest

from wheelfoundry.errors import GuardrailExceeded, RequestInvalid
from wheelfoundry.request.model import BuildRequest, ExtensionRequest
from wheelfoundry.request.request import parse_request

GOOD: dict[str, Any] = {
    "version": "2.5.1",
    "python": ["3.11", "3.12"],
    "targets": [
        {"platform": "x86_64", "accelerator": "cpu"},
        {"platform": "x86_64", "accelerator": "cuda", "cuda": "12.4", "arch_list": "8.0;8.6;9.0+PTX"},
        {"platform": "aarch64", "accelerator": "cpu", "mkldnn": True},
    ],
}


def issues_of(raw: Any) -> list[tuple[str, str]]:
    with pytest.raises(RequestInvalid) as caught:
        parse_request(raw)
    return [(i.path, str(i)) for i in caught.value.issues]


def test_good_request_parses_with_defaults() -> None:
    request = parse_request(GOOD)
    assert isinstance(request, BuildRequest)
    assert request.channel == "release"
    assert request.options.spot and request.options.mpi and not request.options.keep_on_failure
    assert request.options.max_hours == 8 and request.options.executor == "auto"
    assert [t.accelerator for t in request.targets] == ["cpu", "cuda", "cpu"]


def test_defaults_for_an_empty_request() -> None:
    request = parse_request({})
    assert isinstance(request, BuildRequest)
    assert request.version == "2.14.1"  # the newest release in the catalog
    assert request.targets[0].platform == "x86_64" and request.targets[0].accelerator == "cpu"
    assert request.python == ("3.10", "3.11", "3.12", "3.13", "3.14", "3.15")


def test_three_mistakes_are_reported_together_each_with_its_field() -> None:
    raw = {
        **GOOD,
        "pyhton": ["3.11"],
        "python": ["3.99"],
        "targets": [{"platform": "x86_64", "accelerator": "cuda", "cuda": "12.3"}],
    }
    found = issues_of(raw)
    assert [path for path, _ in found] == ["pyhton", "python[0]", "targets[0].cuda"]
    text = "\n".join(message for _, message in found)
    assert "did you mean 'python'" in text
    assert "3.99" in text and "allowed: 3.9, 3.10, 3.11, 3.12" in text
    assert "12.3" in text and "allowed: 11.8, 12.1, 12.4" in text


@pytest.mark.parametrize(
    ("raw", "path", "fragment"),
    [
        ({"verison": "2.5.1"}, "verison", "did you mean 'version'"),
        (
            {"targets": [{"platform": "x86_64", "acelerator": "cpu"}]},
            "targets[0].acelerator",
            "did you mean 'accelerator'",
        ),
        ({"options": {"spott": False}}, "options.spott", "did you mean 'spot'"),
        ({"targets": [{"accelerator": "gpu"}]}, "targets[0].accelerator", "allowed: cpu, cuda"),
        ({"targets": [{"platform": "arm64"}]}, "targets[0].platform", "allowed: x86_64, aarch64"),
        ({"python": "3.11"}, "python", "wrong type"),
        ({"options": {"max_hours": 100}}, "options.max_hours", "100"),
        ({"version": "2.5.7"}, "version", "allowed: 2.5.0, 2.5.1"),
        ({"version": "3.1"}, "version", "not in the compatibility catalog"),
        ({"version": "2.5.1-rc1"}, "version", "release candidates exist only for X.Y.0"),
        ({"version": "2.5.1", "python": ["3.8"]}, "python[0]", "Python 3.8 is not supported by torch 2.5.1"),
        (
            {"targets": [{"accelerator": "cuda"}], "version": "2.5.1"},
            "targets[0].cuda",
            "required when accelerator is cuda",
        ),
        ({"targets": [{"accelerator": "cpu", "cuda": "12.4"}]}, "targets[0].cuda", "applies only to accelerator cuda"),
        (
            {"version": "2.5.1", "targets": [{"platform": "aarch64", "accelerator": "cuda", "cuda": "12.4"}]},
            "targets[0].cuda",
            "CUDA 12.4 on aarch64 is not available for torch 2.5.1",
        ),
        (
            {"version": "2.5.1", "targets": [{"accelerator": "cuda", "cuda": "12.4", "arch_list": "10.0"}]},
            "targets[0].arch_list",
            "CUDA 12.4 cannot target 10.0",
        ),
        (
            {"version": "1.12.1", "targets": [{"accelerator": "cuda", "cuda": "11.3"}]},
            "targets[0].cuda",
            "no pinned nvidia-* wheels",
        ),
        ({"version": "2.4.1", "packages": ["torch", "torchtext"]}, "packages[1]", "0.18 (April 2024, torch 2.3)"),
        ({"version": "a" * 40, "packages": ["torch", "torchvision"]}, "packages[1]", "needs an explicit ref"),
        ({"packages": ["torchvision"]}, "packages", "torch must be built too"),
        ({"packages": ["torch", "torch"]}, "packages[1]", "listed twice"),
        ({"packages": ["torch", "torchwhatever"]}, "packages[1]", "allowed: torch, torchvision"),
        ({"targets": [{"platform": "x86_64"}, {"platform": "x86_64"}]}, "targets[1]", "duplicates targets[0]"),
        ({"targets": [{"instance_type": "z9.huge"}]}, "targets[0].instance_type", "not in the price table"),
        ({"targets": [{"instance_type": "c7g.8xlarge"}]}, "targets[0].instance_type", "is aarch64, not x86_64"),
        ({"targets": [{"platform": "x86_64", "acl": True}]}, "targets[0].acl", "for aarch64 targets"),
        ({"options": {"executor": "fargate"}}, "options.executor", "allowed: auto, ec2, codebuild"),
        ({"preset": "weekly"}, "preset", "allowed: nightly"),
        ({"framework": "tensorflow"}, "framework", "allowed: pytorch, extension"),
        (
            {
                "framework": "extension",
                "name": "e",
                "source": {"git": "https://h.example/r.git"},
                "torch": ["2.13", "2.13.0"],
            },
            "torch[1]",
            "is torch 2.13.0 again",
        ),
    ],
)
def test_each_kind_of_mistake(raw: dict[str, Any], path: str, fragment: str) -> None:
    found = issues_of(raw)
    matching = [message for p, message in found if p == path]
    assert matching, f"no issue at {path}: {found}"
    assert any(fragment in message for message in matching), matching


def test_not_an_object() -> None:
    assert issues_of([1, 2]) == [("", "(request): the request must be a JSON object, not list")]


def test_torch_alone_from_a_commit_is_fine_and_so_are_explicit_refs() -> None:
    request = parse_request(
        {
            "version": "0123456789abcdef0123456789abcdef01234567",
            "packages": ["torch", {"name": "torchvision", "ref": "v0.21.0"}],
        }
    )
    assert isinstance(request, BuildRequest) and request.packages is not None
    assert request.packages[1].ref == "v0.21.0"
    assert request.channel == "dev"


def test_preset_with_overrides() -> None:
    request = parse_request({"preset": "nightly", "python": ["3.12"]})
    assert isinstance(request, BuildRequest)
    assert request.version == "nightly" and request.python == ("3.12",) and request.channel == "nightly"
    assert len(request.targets) == 3


def test_extension_request_and_its_mistakes() -> None:
    good = {
        "framework": "extension",
        "name": "my_ext",
        "source": {"git": "https://github.com/me/my-ext.git"},
        "torch": ["2.13", "2.14"],
        "cuda": ["cpu", "13.0"],
        "python": ["3.11"],
    }
    request = parse_request(good)
    assert isinstance(request, ExtensionRequest)
    assert request.platforms == ("x86_64",) and request.channel == "extensions"
    found = issues_of({**good, "cuda": ["12.4"], "source": {}})
    paths = [p for p, _ in found]
    assert "source" in paths and "cuda[0]" in paths


def test_an_extensions_own_tests_are_typed_and_a_bad_requirement_is_named() -> None:
    good = {
        "framework": "extension",
        "name": "my_ext",
        "source": {"git": "https://github.com/me/my-ext.git"},
        "torch": ["2.13"],
        "test": {"requires": ["pytest", "scipy>=1.10"], "command": ["-m", "pytest", "{project}/test"]},
    }
    request = parse_request(good)
    assert isinstance(request, ExtensionRequest) and request.test is not None
    assert request.test.command == ("-m", "pytest", "{project}/test") and request.test.requires[1] == "scipy>=1.10"
    assert parse_request({**good, "test": {"command": ["{project}/run_tests.py"]}}).test.requires == ()  # type: ignore[union-attr]
    bad = {**good, "test": {"requires": ["--extra-index-url=https://evil.example"], "command": ["-m", "pytest"]}}
    with pytest.raises(RequestInvalid) as caught:
        parse_request(bad)
    assert "test.requires[0]" in str(caught.value) and "--extra-index-url" in str(caught.value)
    with pytest.raises(RequestInvalid, match=r"test\.command"):
        parse_request({**good, "test": {"command": []}})


def test_guardrails_stop_oversized_requests_before_launch() -> None:
    from wheelfoundry.catalog.catalog import load_catalog
    from wheelfoundry.config import load_config
    from wheelfoundry.planning.planning import plan_request

    config = load_config().with_guardrails(max_jobs=2)
    request = parse_request(GOOD, config=config)
    with pytest.raises(GuardrailExceeded) as caught:
        plan_request(request, load_catalog(), config)
    assert "3 jobs exceed this stack's limit of 2" in str(caught.value)
    hours = load_config().with_guardrails(max_instance_hours=1.0)
    with pytest.raises(GuardrailExceeded, match="instance-hours exceed"):
        plan_request(request, load_catalog(), hours)
