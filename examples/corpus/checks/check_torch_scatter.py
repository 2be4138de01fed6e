"""torch-scatter: scatter and segment reductions against torch's own scatter_reduce and index_add.

The package finds its libraries (_scatter_cpu.so, _segment_csr_cpu.so, _segment_coo_cpu.so and
_version_cpu.so: no Python ABI suffix) with importlib's PathFinder and loads them with torch.ops.load_library.
"""

from __future__ import annotations

import sys

import torch
import torch_scatter
from _check import close, main

TORCH_REDUCE = {"sum": "sum", "mean": "mean", "min": "amin", "max": "amax"}


def reference(src: torch.Tensor, index: torch.Tensor, size: int, reduce: str) -> torch.Tensor:
    out = torch.zeros(size, src.shape[1], dtype=src.dtype)
    spread = index.unsqueeze(1).expand_as(src)
    return out.scatter_reduce(0, spread, src, TORCH_REDUCE[reduce], include_self=False)


def check_scatter() -> None:
    src, index = torch.randn(100, 8, dtype=torch.float64), torch.randint(0, 12, (100,))
    for reduce in TORCH_REDUCE:
        got = torch_scatter.scatter(src, index, dim=0, dim_size=12, reduce=reduce)
        close(f"scatter {reduce}", got, reference(src, index, 12, reduce), atol=1e-12)


def check_segment() -> None:
    index = torch.randint(0, 10, (90,)).sort().values
    src = torch.randn(90, 5, dtype=torch.float64)
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(index, minlength=10).cumsum(0)])
    for reduce in TORCH_REDUCE:
        want = reference(src, index, 10, reduce)
        close(f"segment_coo {reduce}", torch_scatter.segment_coo(src, index, dim_size=10, reduce=reduce), want)
        close(f"segment_csr {reduce}", torch_scatter.segment_csr(src, ptr, reduce=reduce), want)


def check_argmax_and_grad() -> None:
    src = torch.randn(60, 4, dtype=torch.float64, requires_grad=True)
    index = torch.randint(0, 6, (60,))
    got, arg = torch_scatter.scatter_max(src, index, dim=0, dim_size=6)
    close("scatter_max values", got, reference(src, index, 6, "max"))
    close("scatter_max argmax", src.detach().gather(0, arg), got.detach())
    grad = torch.randn_like(got)
    (got_grad,) = torch.autograd.grad(got, src, grad)
    (want_grad,) = torch.autograd.grad(reference(src, index, 6, "max"), src, grad)
    close("scatter_max backward", got_grad, want_grad)


if __name__ == "__main__":
    sys.exit(main([check_scatter, check_segment, check_argmax_and_grad]))
