"""torchsort: isotonic regression (the C++ op), soft sort and soft rank against plain torch.

The compiled code is a Python extension module, torchsort/isotonic_cpu.cpython-*.so, imported by name.
"""

from __future__ import annotations

import sys

import torch
import torchsort
from _check import close, main
from torchsort import isotonic_cpu


def isotonic_reference(y: torch.Tensor) -> torch.Tensor:
    """Pool adjacent violators: the closest non-increasing sequence to each row (least squares)."""
    out = torch.empty_like(y)
    for row in range(y.shape[0]):
        blocks: list[list[float]] = []  # [sum, count]
        for value in y[row].tolist():
            blocks.append([value, 1.0])
            while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] < blocks[-1][0] / blocks[-1][1]:
                total, count = blocks.pop()
                blocks[-1][0] += total
                blocks[-1][1] += count
        out[row] = torch.cat([torch.full((int(c),), s / c, dtype=y.dtype) for s, c in blocks])
    return out


def check_isotonic() -> None:
    y = torch.randn(8, 40, dtype=torch.float64)
    close("isotonic_l2", isotonic_cpu.isotonic_l2(y), isotonic_reference(y), atol=1e-12)


def check_hard_limit() -> None:
    # values at least 0.8 apart: far more than the strength, so the soft operators equal the hard ones
    x = torch.stack([torch.randperm(30) for _ in range(6)]).double() + 0.2 * torch.rand(6, 30, dtype=torch.float64)
    close("soft_sort (strength 1e-3) = sort", torchsort.soft_sort(x, regularization_strength=1e-3), x.sort().values)
    ranks = (x.argsort(1).argsort(1) + 1).to(x.dtype)
    close("soft_rank (strength 1e-3) = rank", torchsort.soft_rank(x, regularization_strength=1e-3), ranks)


def check_soft_values() -> None:
    # The soft sort is the isotonic fit of the scaled sorted values (Blondel et al. 2020, eq. 5).
    x = torch.randn(4, 25, dtype=torch.float64)
    w = torch.arange(25, 0, -1, dtype=x.dtype).expand_as(x) / 0.5
    s = (-x).sort(1, descending=True).values
    want = -(w - isotonic_reference(w - s))
    close("soft_sort (l2, strength 0.5)", torchsort.soft_sort(x, regularization_strength=0.5), want, atol=1e-10)


def check_backward() -> None:
    x = torch.randn(3, 12, dtype=torch.float64, requires_grad=True)
    for name in ("soft_rank", "soft_sort"):
        op = getattr(torchsort, name)
        if not torch.autograd.gradcheck(lambda t, op=op: op(t, regularization_strength=0.7), (x,)):
            raise AssertionError(f"{name}: the C++ backward differs from finite differences")
        print(f"ok   {name} backward: matches finite differences (torch.autograd.gradcheck)")


if __name__ == "__main__":
    sys.exit(main([check_isotonic, check_hard_limit, check_soft_values, check_backward]))
