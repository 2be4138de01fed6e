"""Three small operators registered with the PyTorch dispatcher by the ``_C`` library: C++ for CPU
tensors, and CUDA kernels (matmul: cuBLAS) for CUDA tensors when built with ``FORCE_CUDA=1``."""

from __future__ import annotations

import torch

from wf_example_ops import _C  # noqa: F401  (loading it registers torch.ops.wf_example_ops)

__all__ = ["matmul", "relu_square", "scaled_add"]


def scaled_add(a: torch.Tensor, b: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """``a + alpha * b`` for float tensors of the same shape, dtype and device."""
    return torch.ops.wf_example_ops.scaled_add(a, b, float(alpha))


def relu_square(x: torch.Tensor) -> torch.Tensor:
    """``max(x, 0) ** 2`` for a float tensor."""
    return torch.ops.wf_example_ops.relu_square(x)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for 2-D float tensors; on CUDA tensors one cuBLAS GEMM through torch's handle."""
    return torch.ops.wf_example_ops.matmul(a, b)
