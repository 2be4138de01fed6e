"""Two small operators registered with the PyTorch dispatcher by the ``_C`` library: C++ for CPU
tensors, and CUDA kernels for CUDA tensors when built with ``FORCE_CUDA=1``."""

from __future__ import annotations

import torch

from wf_example_ops import _C  # noqa: F401  (loading it registers torch.ops.wf_example_ops)

__all__ = ["relu_square", "scaled_add"]


def scaled_add(a: torch.Tensor, b: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """``a + alpha * b`` for float tensors of the same shape, dtype and device."""
    return torch.ops.wf_example_ops.scaled_add(a, b, float(alpha))


def relu_square(x: torch.Tensor) -> torch.Tensor:
    """``max(x, 0) ** 2`` for a float tensor."""
    return torch.ops.wf_example_ops.relu_square(x)
