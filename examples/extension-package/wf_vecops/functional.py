"""The package's own Python code: it calls the compiled kernels in ``wf_vecops._kernels._C``."""

from __future__ import annotations

import torch

from wf_vecops._kernels import _C


def axpy(alpha: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``alpha * x + y``."""
    return _C.axpy(float(alpha), x, y)


def normalize(x: torch.Tensor) -> torch.Tensor:
    """``x`` scaled to unit Euclidean norm (a zero tensor is returned unchanged)."""
    norm = _C.norm2(x)
    return x if norm == 0 else x / norm


def built_with() -> str:
    """The torch version the loaded kernels were compiled against."""
    return str(_C.TORCH_BUILT_WITH)
