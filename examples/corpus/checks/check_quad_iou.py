"""quad-iou-fixed: the IoU of quadrilaterals (the C++ op, OpenMP over the pairs) against plain torch.

The compiled code is a Python extension module, quad_iou/_C (abi3), imported by name; it links libgomp
(setup.py passes -fopenmp to the linker too), which auditwheel grafts into quad_iou_fixed.libs/.
Axis-aligned rectangles (given as quadrilaterals, vertices in either order) have a closed-form IoU, the
reference; a rotated square against itself is 1.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import quad_iou
import torch
from _check import close, main


def boxes(n: int, dtype: torch.dtype) -> torch.Tensor:
    """(n, 4): x0, y0, x1, y1 with x0 < x1, y0 < y1."""
    corner = torch.rand(n, 2, dtype=dtype) * 10
    size = torch.rand(n, 2, dtype=dtype) * 5 + 0.1
    return torch.cat([corner, corner + size], dim=1)


def as_quads(b: torch.Tensor) -> torch.Tensor:
    x0, y0, x1, y1 = b.unbind(1)
    return torch.stack([torch.stack([x0, y0], 1), torch.stack([x1, y0], 1), torch.stack([x1, y1], 1),
                        torch.stack([x0, y1], 1)], dim=1)  # fmt: skip


def iou_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(len(a), len(b)): IoU of each rectangle of a with each of b (the op's order; its docstring says the
    transpose)."""
    lo = torch.maximum(a[:, None, :2], b[None, :, :2])
    hi = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (hi - lo).clamp(min=0).prod(-1)
    area = lambda r: (r[:, 2:] - r[:, :2]).prod(-1)  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


def check_rectangles() -> None:
    for dtype in (torch.float32, torch.float64):
        a, b = boxes(40, dtype), boxes(30, dtype)
        got = quad_iou.calculate_iou(as_quads(a), as_quads(b))
        close(f"calculate_iou of rectangles ({dtype})", got, iou_reference(a, b), atol=1e-5, rtol=1e-4)


def check_unsorted_rotated() -> None:
    t = torch.arange(4, dtype=torch.float64) * math.pi / 2 + 0.3
    square = torch.stack([t.cos(), t.sin()], 1)[None] + 5  # a rotated square
    shuffled = square[:, [2, 0, 3, 1]]  # vertices out of order: sort_input_quads puts them right
    got = quad_iou.calculate_iou(square, shuffled)
    close("calculate_iou of a rotated square, vertices shuffled", got, torch.ones(1, 1, dtype=torch.float64))


def check_libgomp_grafted() -> None:
    """The op ran (above), so its module is loaded, and with it the libgomp auditwheel grafted beside it
    (renamed libgomp-<hash>.so*, found through the module's RPATH $ORIGIN/../quad_iou_fixed.libs, whether the
    wheel is per-cell or merged: there the build's folder holds both)."""
    maps = Path("/proc/self/maps").read_text().splitlines()
    grafted = sorted({line.split()[-1] for line in maps if "quad_iou_fixed.libs/libgomp-" in line})
    if not grafted:
        raise AssertionError("no grafted libgomp (quad_iou_fixed.libs/libgomp-*) is mapped in this process")
    where = Path(grafted[0])
    print(f"ok   {where.parent.parent.name}/{where.parent.name}/{where.name} is loaded (auditwheel's graft)")


if __name__ == "__main__":
    sys.exit(main([check_rectangles, check_unsorted_rotated, check_libgomp_grafted]))
