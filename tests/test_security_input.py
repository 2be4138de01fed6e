"""Issue 10 item 6: input the JSON parser itself cannot handle is an exit 2 with one line (CLI) and
RequestInvalid in the Validate step, never a traceback."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from wheelfoundry_cli.main import main

from wheelfoundry.aws.runs import ValidateSettings, validate
from wheelfoundry.errors import LaunchFailed, RequestInvalid
from wheelfoundry.request.request import MAX_DEPTH, loads_request, parse_request

BAD_FILES: dict[str, tuple[bytes, str]] = {
    "deep-nesting": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    "deep-but-parseable": (b'{"options": ' + b"[" * 200 + b"]" * 200 + b"}", "nested deeper than"),
    "huge-integer": (b'{"options": {"max_hours": ' + b"9" * 5000 + b"}}", "not valid JSON"),
    "big-integer": (b'{"options": {"max_hours": ' + b"9" * 40 + b"}}", "out of range"),
    "huge-float": (b'{"options": {"max_hours": 1e999}}', "not a finite number"),
    "nan": (b'{"options": {"max_hours": NaN}}', "NaN is not JSON"),
    "invalid-utf8": (b'{"version": "2.5.\xff"}', "not UTF-8"),
    "lone-surrogate": (b'{"version": "\\ud800"}', "lone surrogate"),
    "not-json": (b"version = '2.5.1'\n", "not valid JSON"),
    "empty": (b"", "not valid JSON"),
    "too-big": (b'{"x": "' + b"a" * 300_000 + b'"}', "at most"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_cli_exits_2_with_one_line(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, expected = BAD_FILES[name]
    path = tmp_path / f"{name}.json"
    path.write_bytes(data)
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and str(path) in err, err
    assert expected in err and "Traceback" not in err


def test_unreadable_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dir.json"
    path.mkdir()
    (path / "x").write_text("{}")
    # A directory is not a request file: it is reported as neither file nor preset.
    assert main(["plan", str(path)]) == 2
    assert "neither a request file nor a preset" in capsys.readouterr().err


def _deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"a": value}
    return value


VALIDATE_INPUTS: dict[str, tuple[Any, str]] = {
    "deep": ({"options": _deep(MAX_DEPTH + 5)}, "nested deeper than"),
    "many-values": ({"python": ["3.11"] * 30_000}, "more than"),
    "big-int": ({"options": {"max_hours": 10**30}}, "out of range"),
    "infinity": ({"options": {"max_hours": float("inf")}}, "not a finite number"),
    "surrogate": ({"version": "2.5\ud800"}, "lone surrogate"),
    "surrogate-key": ({"\udc80": 1}, "not valid Unicode"),
    "not-an-object": ([1, 2], "must be a JSON object"),
}


class NoS3:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"Validate touched S3 ({name}) for an invalid request")


@pytest.mark.parametrize("name", sorted(VALIDATE_INPUTS))
def test_validate_fails_as_request_invalid(name: str) -> None:
    request, expected = VALIDATE_INPUTS[name]
    settings = ValidateSettings(
        bucket="b", region="us-east-1", ecr_repository="", max_jobs=24, max_instance_hours=250,
        heartbeat_seconds=900, max_concurrency=10,
    )  # fmt: skip
    event = {"request": request, "name": "run1", "execution": "arn:aws:states:us-east-1:1:execution:x:run1"}
    with pytest.raises(RequestInvalid) as caught:
        validate(event, NoS3(), settings, date(2026, 11, 22))
    assert type(caught.value) is RequestInvalid and expected in str(caught.value)


def test_a_request_at_the_depth_limit_is_judged_by_the_schema_not_the_guard() -> None:
    with pytest.raises(RequestInvalid) as caught:
        parse_request({"options": _deep(MAX_DEPTH - 2)})
    assert "nested deeper" not in str(caught.value)


def test_loads_request_accepts_a_real_request() -> None:
    text = (Path(__file__).parents[1] / "examples/requests/torch-2.5.1-three-targets.json").read_bytes()
    assert loads_request(text, "x") == json.loads(text)


def _extension(uri: str) -> dict[str, Any]:
    request = json.loads((Path(__file__).parents[1] / "examples/requests/extension-demo.json").read_text())
    return {**request, "source": {"s3": uri}}


@pytest.mark.parametrize(
    ("uri", "source_bucket", "refused"),
    [
        ("s3://farm/sources/x.tar.gz", "", False),
        ("s3://farm/runs/other/x.tar.gz", "", True),  # the stack bucket, but not its sources/ prefix
        ("s3://elsewhere/sources/x.tar.gz", "", True),
        ("s3://mine/any/x.tar.gz", "mine", False),  # the bucket the stack was deployed to allow
        ("s3://elsewhere/x.tar.gz", "mine", True),
    ],
)
def test_an_extension_source_the_build_roles_cannot_read_is_refused_before_anything_is_written(
    uri: str, source_bucket: str, refused: bool
) -> None:
    settings = ValidateSettings(
        bucket="farm", region="us-east-1", ecr_repository="", max_jobs=24, max_instance_hours=250,
        heartbeat_seconds=900, max_concurrency=10, source_bucket=source_bucket,
    )  # fmt: skip
    event = {"request": _extension(uri), "name": "run1", "execution": "arn:aws:states:us-east-1:1:execution:x:run1"}
    if not refused:
        with pytest.raises(LaunchFailed, match=r"bundles/current\.json"):  # past validation: reading S3
            validate(event, NoS3(), settings, date(2026, 11, 22))
        return
    with pytest.raises(RequestInvalid) as caught:
        validate(event, NoS3(), settings, date(2026, 11, 22))
    text = str(caught.value)
    assert "source.s3" in text and uri in text and "s3://farm/sources/<key>" in text
    assert ("s3://mine/<key>" in text) == bool(source_bucket)
