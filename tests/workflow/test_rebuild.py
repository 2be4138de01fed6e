"""`wheelfoundry rebuild RUN` through the real template and state machine: the run's own request again,
into the scratch channel rebuild-<run>; a reproducible extension comes back byte-identical, and a wheel
that differs is reported member by member (cli/wheelfoundry_user/rebuild.py)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from wheelfoundry_cli.main import main

from tests.workflow.conftest import extension_request, run, s3_keys, source, upload
from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_user import EXIT_OK
from wheelfoundry_user.rebuild import Compared, member_differences, scratch_channel


@pytest.mark.heavy  # two whole runs: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_a_rebuilt_run_gives_the_same_bytes_in_a_scratch_channel(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(aws, stack, extension_request(upload(aws, stack, source(tmp_path)), layout="per-cell"))
    assert result.succeeded, (result.error, result.cause)
    run_id = result.output["run_id"]
    published = s3_keys(aws, stack, "wheels/ci/")
    capsys.readouterr()
    code = main(["rebuild", run_id, "--stack", stack.name, "--endpoint-url", aws.endpoint, "--wait", "600", "--json"])
    out = capsys.readouterr().out
    data = json.loads(out[out.index('{\n  "run"') :])
    assert code == EXIT_OK and data["same"] is True, data
    salt = data["rebuild"].rsplit("-", 1)[1]
    assert data["run"] == run_id and data["channel"] == scratch_channel(run_id, salt)
    (wheel,) = data["wheels"]
    assert wheel["original"] == wheel["rebuilt"] and len(wheel["original"]) == 64 and wheel["members"] == []
    # The rebuild published into its own channel only: the original channel's objects are untouched.
    assert any(k.endswith(wheel["filename"]) for k in s3_keys(aws, stack, f"wheels/{data['channel']}/"))
    assert s3_keys(aws, stack, "wheels/ci/") == published


def _wheel(members: dict[str, tuple[bytes, tuple[int, ...], int]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, (body, when, mode) in members.items():
            info = zipfile.ZipInfo(name, when)  # type: ignore[arg-type]
            info.external_attr = mode << 16
            archive.writestr(info, body)
    return buffer.getvalue()


def test_a_differing_wheel_is_reported_member_by_member() -> None:
    t0, t1 = (2020, 1, 1, 0, 0, 0), (2026, 11, 24, 7, 0, 0)
    original = _wheel({"m/__init__.py": (b"x = 1\n", t0, 0o644), "m/_c.so": (b"\x7fELF-a", t0, 0o755),
                       "m/old.py": (b"", t0, 0o644)})  # fmt: skip
    rebuilt = _wheel({"m/__init__.py": (b"x = 1\n", t1, 0o644), "m/_c.so": (b"\x7fELF-bb", t0, 0o755),
                      "m/new.py": (b"", t0, 0o644)})  # fmt: skip
    lines = member_differences(original, rebuilt)
    assert lines[0] == "  only in the original: m/old.py" and lines[1] == "  only in the rebuild: m/new.py"
    assert any(line.startswith("  m/__init__.py: same content, zip entry differs (time (2020, 1, 1") for line in lines)
    assert any(
        line.startswith("  m/_c.so: content differs (6 bytes sha256:") and "vs 7 bytes" in line for line in lines
    )
    assert member_differences(original, original) == [
        "  same members and contents; the archives differ in their zip framing"
    ]
    assert Compared("w.whl", "a" * 64, "b" * 64).line().startswith("DIFF w.whl: sha256:aaaa")
    assert Compared("w.whl", None, "b" * 64).line() == "DIFF w.whl: only in the rebuild"
    assert Compared("w.whl", "a" * 64, "a" * 64).same and not Compared("w.whl", None, None).same
    assert scratch_channel("20261124-070000-ABC_def", "a1b2c3") == "rebuild-20261124-070000-abc-def-a1b2c3"
    assert len(scratch_channel("x" * 80, "a1b2c3")) == 63 and scratch_channel("x" * 80, "a1b2c3").endswith("-a1b2c3")
