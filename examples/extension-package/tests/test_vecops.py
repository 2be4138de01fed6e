"""wf-vecops' own tests: they run against the installed wheel (merged or not)."""

from __future__ import annotations

import pytest
import torch
import wf_vecops


def test_axpy_matches_torch() -> None:
    x, y = torch.randn(64), torch.randn(64)
    torch.testing.assert_close(wf_vecops.axpy(2.5, x, y), 2.5 * x + y)


def test_normalize_gives_unit_norm() -> None:
    out = wf_vecops.normalize(torch.tensor([3.0, 4.0]))
    torch.testing.assert_close(out, torch.tensor([0.6, 0.8]))
    zero = torch.zeros(3)
    assert wf_vecops.normalize(zero) is zero


def test_kernels_were_built_for_this_torch() -> None:
    # The merged wheel's loader must have picked the build made for the installed torch release.
    built = wf_vecops.built_with().split(".")[:2]
    assert built == torch.__version__.split("+")[0].split(".")[:2]


def test_shape_mismatch_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="same shape"):
        wf_vecops.axpy(1.0, torch.zeros(2), torch.zeros(3))
