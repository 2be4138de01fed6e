"""wf_example_ops against pure torch: same numbers, same errors for bad input."""

from __future__ import annotations

import pytest
import torch
import wf_example_ops
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_scaled_add_matches_torch(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(4, 5, generator=gen, dtype=dtype)
    b = torch.randn(4, 5, generator=gen, dtype=dtype)
    torch.testing.assert_close(wf_example_ops.scaled_add(a, b, 0.5), a + 0.5 * b)
    torch.testing.assert_close(wf_example_ops.scaled_add(a, b), torch.add(a, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_relu_square_matches_torch(dtype: torch.dtype) -> None:
    x = torch.linspace(-3, 3, 13, dtype=dtype)
    got = wf_example_ops.relu_square(x)
    torch.testing.assert_close(got, torch.relu(x) ** 2)
    assert got.dtype == dtype and got.shape == x.shape


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matmul_matches_torch(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(7, 5, generator=gen, dtype=dtype)
    b = torch.randn(5, 3, generator=gen, dtype=dtype)
    torch.testing.assert_close(wf_example_ops.matmul(a, b), a @ b)
    torch.testing.assert_close(wf_example_ops.matmul(a.t().contiguous().t(), b), a @ b)  # non-contiguous
    with pytest.raises(RuntimeError, match="do not chain"):
        wf_example_ops.matmul(a, a)


def test_non_contiguous_input() -> None:
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4).t() - 5.0
    assert not x.is_contiguous()
    torch.testing.assert_close(wf_example_ops.relu_square(x), torch.relu(x) ** 2)
    torch.testing.assert_close(wf_example_ops.scaled_add(x, x, -1.0), torch.zeros(4, 3))


def test_ops_are_registered_with_the_dispatcher() -> None:
    a, b = torch.ones(3), torch.full((3,), 2.0)
    torch.testing.assert_close(torch.ops.wf_example_ops.scaled_add(a, b, 3.0), torch.full((3,), 7.0))
    assert "wf_example_ops::relu_square" in str(torch.ops.wf_example_ops.relu_square.default._schema)


def test_bad_input_is_rejected() -> None:
    with pytest.raises(RuntimeError, match="shapes differ"):
        wf_example_ops.scaled_add(torch.ones(2), torch.ones(3))
    with pytest.raises(RuntimeError, match="dtypes differ"):
        wf_example_ops.scaled_add(torch.ones(2), torch.ones(2, dtype=torch.float64))
    with pytest.raises(RuntimeError):
        wf_example_ops.relu_square(torch.ones(2, dtype=torch.int64))


def test_smoke_entry_point_runs() -> None:
    from wf_example_ops import smoke

    smoke.main()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=64),
    st.floats(-10, 10, allow_nan=False),
)
def test_scaled_add_property(values: list[float], alpha: float) -> None:
    a = torch.tensor(values, dtype=torch.float64)
    b = a.flip(0)
    torch.testing.assert_close(wf_example_ops.scaled_add(a, b, alpha), a + alpha * b)
    torch.testing.assert_close(wf_example_ops.relu_square(a), a.clamp(min=0) ** 2)
