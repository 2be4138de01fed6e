"""torch-spline-conv: B-spline basis, weighting and the full convolution against plain torch.

The package finds its three libraries (_version_cpu.so, _basis_cpu.so, _weighting_cpu.so: no Python
ABI suffix) with importlib's PathFinder beside its __init__ and loads them with torch.ops.load_library.
"""

from __future__ import annotations

import sys

import torch
import torch_spline_conv as tsc
from _check import close, main


def basis_reference(
    pseudo: torch.Tensor, kernel_size: torch.Tensor, is_open: torch.Tensor, degree: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The open/closed B-spline basis products and weight indices, as the paper defines them."""
    edges, dims = pseudo.shape
    s_count = (degree + 1) ** dims
    v = pseudo * (kernel_size - degree * is_open.long()).to(pseudo.dtype)
    low, frac = v.floor().long(), v - v.floor()
    basis = torch.ones(edges, s_count, dtype=pseudo.dtype)
    index = torch.zeros(edges, s_count, dtype=torch.long)
    for s in range(s_count):
        k, offset = s, 1
        for d in range(dims):
            k_mod, k = k % (degree + 1), k // (degree + 1)
            t = frac[:, d]
            if degree == 1:
                factor = t if k_mod else 1 - t
            else:  # degree 2: the quadratic B-spline pieces
                factor = [0.5 * (1 - t) ** 2, -(t**2) + t + 0.5, 0.5 * t**2][k_mod]
            basis[:, s] *= factor
            index[:, s] += ((low[:, d] + k_mod) % kernel_size[d]) * offset
            offset *= int(kernel_size[d])
    return basis, index


def weighting_reference(
    x: torch.Tensor, weight: torch.Tensor, basis: torch.Tensor, index: torch.Tensor
) -> torch.Tensor:
    per_s = torch.einsum("ei,esio->eso", x, weight[index])
    return (basis.unsqueeze(-1) * per_s).sum(1)


def check_basis() -> None:
    pseudo = torch.rand(64, 3, dtype=torch.float64)
    kernel_size = torch.tensor([5, 4, 3])
    is_open = torch.tensor([1, 0, 1], dtype=torch.uint8)
    for degree in (1, 2):
        basis, index = tsc.spline_basis(pseudo, kernel_size, is_open, degree)
        want_basis, want_index = basis_reference(pseudo, kernel_size, is_open, degree)
        close(f"spline_basis degree {degree} (basis)", basis, want_basis, atol=1e-12)
        close(f"spline_basis degree {degree} (weight index)", index, want_index)


def check_weighting_and_grad() -> None:
    pseudo = torch.rand(40, 2, dtype=torch.float64)
    kernel_size, is_open = torch.tensor([5, 5]), torch.tensor([1, 1], dtype=torch.uint8)
    basis, index = tsc.spline_basis(pseudo, kernel_size, is_open, 1)
    x = torch.randn(40, 6, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(25, 6, 4, dtype=torch.float64, requires_grad=True)
    got = tsc.spline_weighting(x, weight, basis, index)
    want = weighting_reference(x, weight, basis, index)
    close("spline_weighting", got, want, atol=1e-10)
    grad = torch.randn_like(got)
    got_dx, got_dw = torch.autograd.grad(got, (x, weight), grad)
    want_dx, want_dw = torch.autograd.grad(want, (x, weight), grad)
    close("spline_weighting backward (x)", got_dx, want_dx, atol=1e-10)
    close("spline_weighting backward (weight)", got_dw, want_dw, atol=1e-10)


def check_conv() -> None:
    nodes, edges = 20, 60
    x = torch.randn(nodes, 3)
    edge_index = torch.randint(0, nodes, (2, edges))
    pseudo = torch.rand(edges, 2)
    weight, root = torch.randn(25, 3, 5), torch.randn(3, 5)
    bias = torch.randn(5)
    kernel_size, is_open = torch.tensor([5, 5]), torch.tensor([1, 1], dtype=torch.uint8)
    got = tsc.spline_conv(x, edge_index, pseudo, weight, kernel_size, is_open, 1, True, root, bias)
    basis, index = basis_reference(pseudo, kernel_size, is_open, 1)
    messages = weighting_reference(x[edge_index[1]], weight, basis, index)
    summed = torch.zeros(nodes, 5).index_add_(0, edge_index[0], messages)
    degree = torch.zeros(nodes).index_add_(0, edge_index[0], torch.ones(edges)).clamp(min=1)
    want = summed / degree.unsqueeze(-1) + x @ root + bias
    close("spline_conv (mean aggregation, root weight, bias)", got, want, atol=1e-5)


if __name__ == "__main__":
    sys.exit(main([check_basis, check_weighting_and_grad, check_conv]))
