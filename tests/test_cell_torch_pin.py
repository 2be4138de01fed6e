"""Every cell wheel requires the torch minor it was built against (issue 65 item 2), set by the repair stage,
so the bytes that smoke, the test jobs and the test of the published bytes see already carry it."""

from __future__ import annotations

from email.parser import BytesHeaderParser
from pathlib import Path

import pytest

from tests.tiny_wheels import metadata_of, pure_wheel
from wfbuild.wheels import repair, wheelfile
from wheelfoundry.publishing.merge import torch_requirement


@pytest.mark.parametrize("version", ["2.11.0", "2.12.1", "2.9.0", "3.0.0", "2.13.0.dev20260101"])
def test_the_runner_pins_as_merge_requires_for_one_release(version: str) -> None:
    assert wheelfile.torch_pin(version) == torch_requirement([version])


def test_repair_labels_and_pins_the_cell_wheel(tmp_path: Path) -> None:
    raw = pure_wheel(tmp_path / "raw", "wf-ext", "1.0", ["torch", "numpy>=1", 'torch[opt]; extra == "opt"'])
    out = tmp_path / "out"
    argv = ["--out-dir", str(out), "--plat", "auto", "--local-label", "pt211cu130", "--pin-torch", "2.11.0"]
    assert repair.main([*argv, str(raw)]) == 0
    (wheel,) = out.glob("*.whl")
    assert wheel.name == "wf_ext-1.0+pt211cu130-py3-none-any.whl"
    requires = BytesHeaderParser().parsebytes(metadata_of(wheel)).get_all("Requires-Dist")
    # Its own unpinned torch gives way; what an extra asks for stays.
    assert sorted(requires) == sorted(["numpy>=1", 'torch[opt]; extra == "opt"', "torch<2.12,>=2.11"])


def test_a_wheel_without_torch_gets_the_pin_and_one_that_has_it_is_unchanged(tmp_path: Path) -> None:
    raw = pure_wheel(tmp_path / "raw", "wf-ext", "1.0")
    assert repair.main(["--out-dir", str(tmp_path / "a"), "--plat", "auto", "--pin-torch", "2.12.0", str(raw)]) == 0
    (first,) = (tmp_path / "a").glob("*.whl")
    assert b"Requires-Dist: torch<2.13,>=2.12\n" in metadata_of(first)
    assert repair.main(["--out-dir", str(tmp_path / "b"), "--plat", "auto", "--pin-torch", "2.12.0", str(first)]) == 0
    (second,) = (tmp_path / "b").glob("*.whl")
    assert metadata_of(second).count(b"Requires-Dist: torch") == 1
