"""The example's tests import the *installed* wf_example_ops; nothing here is skipped.

Build and install it into the test environment first (no build isolation, so it compiles against
the torch already installed there):

    .venv/bin/python -m pip install --no-build-isolation ./examples/extension

(the Makefile's venv step does this). Without it every test here errors with that instruction.
"""

from __future__ import annotations

import importlib.util

import pytest

INSTRUCTION = (
    "wf_example_ops is not installed: run .venv/bin/python -m pip install --no-build-isolation ./examples/extension"
)


@pytest.fixture(autouse=True)
def _installed() -> None:
    if importlib.util.find_spec("wf_example_ops") is None:
        pytest.fail(INSTRUCTION, pytrace=False)
