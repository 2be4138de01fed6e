"""torch-cluster: grid, farthest point sampling, k-NN and radius search against plain torch.

The package finds its libraries (_grid_cpu.so, _fps_cpu.so, _knn_cpu.so, ... and _version_cpu.so: no
Python ABI suffix) with importlib's PathFinder beside its __init__ and loads them with torch.ops.load_library.
"""

from __future__ import annotations

import sys

import torch
import torch_cluster
from _check import close, main


def pairs(index: torch.Tensor, width: int) -> torch.Tensor:
    """Edges [2, E] as sorted flat keys (row * width + col): the order an op lists them in is free."""
    return (index[0] * width + index[1]).sort().values


def check_grid() -> None:
    pos = torch.rand(200, 3, dtype=torch.float64) * 10
    size = torch.tensor([1.5, 2.0, 0.7], dtype=torch.float64)
    got = torch_cluster.grid_cluster(pos, size)
    start, end = pos.min(0).values, pos.max(0).values
    voxels = ((end - start) / size).long() + 1
    stride = torch.cat([torch.ones(1, dtype=torch.long), voxels.cumprod(0)[:-1]])
    want = (((pos - start) / size).long() * stride).sum(1)
    close("grid_cluster", got, want)


def check_fps() -> None:
    src = torch.rand(128, 3)
    got = torch_cluster.fps(src, ratio=0.25, random_start=False)
    chosen, dist = [0], (src - src[0]).pow(2).sum(1)
    while len(chosen) < 32:
        chosen.append(int(dist.argmax()))
        dist = torch.minimum(dist, (src - src[chosen[-1]]).pow(2).sum(1))
    close("fps (ratio 0.25, first point first)", got, torch.tensor(chosen))


def check_knn() -> None:
    x, y, k = torch.rand(300, 3), torch.rand(50, 3), 7
    got = torch_cluster.knn(x, y, k)
    nearest = torch.cdist(y, x).topk(k, largest=False).indices
    want = torch.stack([torch.arange(50).repeat_interleave(k), nearest.reshape(-1)])
    close("knn (k=7)", pairs(got, 300), pairs(want, 300))


def check_radius() -> None:
    x, y, r = torch.rand(300, 3), torch.rand(50, 3), 0.2
    got = torch_cluster.radius(x, y, r, max_num_neighbors=300)
    rows, cols = (torch.cdist(y, x) < r).nonzero(as_tuple=True)
    close("radius (r=0.2)", pairs(got, 300), pairs(torch.stack([rows, cols]), 300))


if __name__ == "__main__":
    sys.exit(main([check_grid, check_fps, check_knn, check_radius]))
