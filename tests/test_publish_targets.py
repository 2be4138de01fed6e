"""Issue 31: `options.publish` and `--to`: every form the request takes, and each mistake named with its
field, its value and what is allowed, before anything runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wheelfoundry.errors import RequestInvalid
from wheelfoundry.request.publish_targets import (
    CodeArtifactRepo,
    PublishTarget,
    local_label,
    over_limit,
    parse_target,
    parse_to,
)
from wheelfoundry.request.request import parse_request

ROOT = Path(__file__).resolve().parents[1]
DEMO = json.loads((ROOT / "examples/requests/extension-demo.json").read_text())


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("pypi", PublishTarget("pypi")),
        ("testpypi", PublishTarget("testpypi")),
        ({"repository": "pypi", "max_file_mb": 400}, PublishTarget("pypi", max_file_mb=400)),
        (
            {"codeartifact": {"domain": "my-domain", "repository": "my-repo", "owner": "111122223333"}},
            PublishTarget("codeartifact", codeartifact=CodeArtifactRepo("my-domain", "my-repo", "111122223333")),
        ),
        (
            {"url": "https://nexus.example.com/repository/py/"},
            PublishTarget("url", url="https://nexus.example.com/repository/py/"),
        ),
        ({"url": "http://127.0.0.1:8080/"}, PublishTarget("url", url="http://127.0.0.1:8080/")),
    ],
)
def test_valid_targets(value: Any, expected: PublishTarget) -> None:
    target, issues = parse_target(value)
    assert issues == [] and target == expected
    assert PublishTarget.from_dict(json.loads(json.dumps(expected.to_dict()))) == expected  # through the run's JSON


@pytest.mark.parametrize(
    ("value", "path", "message", "allowed"),
    [
        ("pipy", "options.publish", "'pipy' is not a publish target", "pypi"),
        ({"repository": "warehouse"}, "options.publish.repository", "'warehouse' is not allowed", "testpypi"),
        (
            {"codeartifact": {"domain": "My_Domain", "repository": "r1"}},
            "options.publish.codeartifact.domain",
            "'My_Domain' is not valid",
            None,
        ),
        (
            {"codeartifact": {"domain": "d1", "repository": "r1", "owner": "12"}},
            "options.publish.codeartifact.owner",
            "'12' is not valid",
            None,
        ),
        (
            {"codeartifact": {"domain": "d1", "repo": "r1"}},
            "options.publish.codeartifact.repo",
            "unknown field 'repo'",
            "repository",
        ),
        ({"url": "http://index.example.com/"}, "options.publish.url", "http:// only to 127.0.0.1", "https://..."),
        ({"url": "ftp://x/"}, "options.publish.url", "'ftp://x/' is not an upload URL", "pypi"),
        ({"url": "https://u:p@x.example/"}, "options.publish.url", "credentials in it", None),
        ({"url": "https://x.example/", "repository": "pypi"}, "options.publish", "give exactly one of", "codeartifact"),
        (
            {"repository": "pypi", "max_file_mb": 0},
            "options.publish.max_file_mb",
            "0 is not a size in MB",
            "0 < max_file_mb <= 5000",
        ),
        ({"repository": "pypi", "token": "pypi-abc"}, "options.publish.token", "unknown field 'token'", "max_file_mb"),
        (42, "options.publish", "has the wrong type", "pypi"),
    ],
)
def test_mistakes_name_field_value_and_allowed(value: Any, path: str, message: str, allowed: str | None) -> None:
    target, issues = parse_target(value)
    assert target is None
    issue = next(i for i in issues if i.path == path)
    assert message in issue.message, issue
    if allowed is not None:
        assert allowed in issue.allowed, issue


def test_the_request_carries_the_target_and_refuses_a_bad_one_before_planning() -> None:
    request = parse_request({**DEMO, "options": {"publish": {"repository": "testpypi", "max_file_mb": 250}}})
    assert request.options.publish == PublishTarget("testpypi", max_file_mb=250)
    assert parse_request(DEMO).options.publish is None
    with pytest.raises(RequestInvalid) as caught:
        parse_request({**DEMO, "options": {"publish": "pypl"}})
    text = str(caught.value)
    assert "options.publish" in text and "'pypl'" in text and "testpypi" in text


def test_to_on_the_command_line() -> None:
    assert parse_to("codeartifact:my-domain/my-repo").codeartifact == CodeArtifactRepo("my-domain", "my-repo")
    assert parse_to("pypi", max_file_mb=300).limit_mb == 300
    assert parse_to("http://127.0.0.1:9/", index_url="http://127.0.0.1:9/idx/").endpoints() == (
        "http://127.0.0.1:9/",
        "http://127.0.0.1:9/idx/",
    )
    assert PublishTarget("pypi").endpoints() == ("https://upload.pypi.org/legacy/", "https://pypi.org/simple/")
    with pytest.raises(RequestInvalid, match=r"--to\.codeartifact\.repository"):
        parse_to("codeartifact:my-domain")


def test_publish_command_exits_2_naming_the_bad_target(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "wheelfoundry_cli.main", "publish", "demo", "--to", "http://pypi.example.com/"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--to.url" in done.stderr and "http:// only to 127.0.0.1" in done.stderr


def test_over_limit_names_the_limit_and_the_ways_out() -> None:
    assert over_limit("x.whl", 100_000_000, PublishTarget("pypi")) is None
    why = over_limit("x.whl", 180_400_000, PublishTarget("pypi"))
    assert why is not None and "180.4 MB, over pypi's per-file limit of 100 MB" in why
    assert "public channel" in why and "fewer archs" in why and "limit increase" in why
    assert over_limit("x.whl", 10**10, PublishTarget("url", url="https://x.example/")) is None  # no known limit


def test_per_cell_wheels_aimed_at_pypi_are_refused_before_anything_is_built(tmp_path: Path) -> None:
    for target in ("pypi", {"repository": "testpypi"}):
        with pytest.raises(RequestInvalid) as caught:
            parse_request({**DEMO, "layout": "per-cell", "options": {"publish": target}})
        text = str(caught.value)
        assert "options.publish" in text and "local version labels" in text and "PublicChannels=" in text, text
    assert parse_request({**DEMO, "layout": "merged", "options": {"publish": "pypi"}}).options.publish
    url = {"url": "https://pypi.example.org/upload/"}  # an index of one's own may take local versions
    assert parse_request({**DEMO, "layout": "per-cell", "options": {"publish": url}}).options.publish
    request = tmp_path / "per-cell-pypi.json"
    request.write_text(json.dumps({**DEMO, "layout": "per-cell", "options": {"publish": "pypi"}}))
    done = subprocess.run(
        [sys.executable, "-m", "wheelfoundry_cli.main", "plan", str(request)], capture_output=True, text=True
    )
    assert done.returncode == 2 and "which pypi refuses" in done.stderr, done.stdout + done.stderr


def test_upload_refuses_a_local_label_only_where_the_index_refuses_it() -> None:
    labelled = "wf_x-0.3.0+pt211cu130-cp311-cp311-manylinux_2_28_x86_64.whl"
    why = local_label(labelled, PublishTarget("testpypi"))
    assert why is not None and "+pt211cu130" in why and "public channel" in why
    assert local_label(labelled, PublishTarget("url", url="https://x.example/")) is None
    assert local_label("wf_x-0.3.0-cp311-cp311-manylinux_2_28_x86_64.whl", PublishTarget("pypi")) is None


def _settings(**kwargs: Any) -> Any:
    from wheelfoundry.aws.runs import ValidateSettings

    return ValidateSettings("b", "us-east-1", "", 24, 250.0, 900, 10, **kwargs)


def test_validate_refuses_a_target_the_stack_cannot_publish_to() -> None:
    from wheelfoundry.aws.runs import check_publish_target

    def check(publish: Any, **settings: Any) -> None:
        check_publish_target(parse_request({**DEMO, "options": {"publish": publish}}), _settings(**settings))

    with pytest.raises(RequestInvalid, match="pypi needs a token: deploy the stack with PublishTokenSecretArn"):
        check("pypi")
    check("pypi", publish_secret=True)
    check({"url": "https://nexus.example.com/repository/py/"})  # an index of one's own may take anonymous uploads
    ca = {"codeartifact": {"domain": "my-domain", "repository": "my-repo"}}
    with pytest.raises(RequestInvalid, match=r"options\.publish\.codeartifact: my-domain/my-repo is not .*\(none\)"):
        check(ca)
    check(ca, publish_codeartifact="my-domain/my-repo@")
    with pytest.raises(RequestInvalid, match=r"\(my-domain/other@111122223333\)"):
        check(ca, publish_codeartifact="my-domain/other@111122223333")
    with pytest.raises(RequestInvalid):
        check(
            {"codeartifact": {**ca["codeartifact"], "owner": "444455556666"}},
            publish_codeartifact="my-domain/my-repo@111122223333",
        )
