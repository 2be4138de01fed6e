"""The corpus's CUDA builds on a GPU: each op on CUDA tensors against plain torch (and its own CPU path).

``python gpu_check.py torch_spline_conv torchsort`` in an environment where the wheels under test were
installed from their published bytes (examples/corpus/gpu_check.sh does that). Prints one line per check
and exits 1 if any differs. Standard library, torch and the packages under test only.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch

CUDA = torch.device("cuda")


def close(name: str, got: torch.Tensor, want: torch.Tensor, atol: float) -> str:
    got, want = got.detach().cpu(), want.detach().cpu()
    diff = float((got.double() - want.double()).abs().max()) if got.numel() else 0.0
    assert got.shape == want.shape and diff <= atol, f"{name}: max |diff| {diff:.3e} > {atol} ({got.shape})"
    return f"{name}: max |diff| {diff:.1e}"


def spline_conv() -> list[str]:
    import torch_spline_conv as tsc

    out = []
    pseudo = torch.rand(4096, 3, dtype=torch.float64)
    kernel_size, is_open = torch.tensor([5, 4, 3]), torch.tensor([1, 0, 1], dtype=torch.uint8)
    for degree in (1, 2):
        cpu_basis, cpu_index = tsc.spline_basis(pseudo, kernel_size, is_open, degree)
        basis, index = tsc.spline_basis(pseudo.to(CUDA), kernel_size.to(CUDA), is_open.to(CUDA), degree)
        out.append(close(f"spline_basis degree {degree} cuda vs cpu", basis, cpu_basis, 1e-12))
        assert torch.equal(index.cpu(), cpu_index), "spline_basis weight index differs between cuda and cpu"
    # The convolution against plain torch on the GPU: gather, weight, mean-aggregate, root weight, bias.
    nodes, edges = 500, 4000
    x = torch.randn(nodes, 8, device=CUDA, dtype=torch.float64)
    edge_index = torch.randint(0, nodes, (2, edges), device=CUDA)
    pseudo = torch.rand(edges, 2, device=CUDA, dtype=torch.float64)
    weight = torch.randn(25, 8, 16, device=CUDA, dtype=torch.float64)
    root, bias = torch.randn(8, 16, device=CUDA, dtype=torch.float64), torch.randn(16, device=CUDA, dtype=torch.float64)
    ks, op = torch.tensor([5, 5], device=CUDA), torch.tensor([1, 1], dtype=torch.uint8, device=CUDA)
    got = tsc.spline_conv(x, edge_index, pseudo, weight, ks, op, 1, True, root, bias)
    basis, index = tsc.spline_basis(pseudo, ks, op, 1)
    messages = (basis.unsqueeze(-1) * torch.einsum("ei,esio->eso", x[edge_index[1]], weight[index])).sum(1)
    summed = torch.zeros(nodes, 16, device=CUDA, dtype=torch.float64).index_add_(0, edge_index[0], messages)
    count = torch.zeros(nodes, device=CUDA, dtype=torch.float64).index_add_(
        0, edge_index[0], torch.ones_like(pseudo[:, 0])
    )
    want = summed / count.clamp(min=1).unsqueeze(-1) + x @ root + bias
    out.append(close("spline_conv cuda vs plain torch", got, want, 1e-9))
    return out


def torchsort_checks() -> list[str]:
    import torchsort

    out = []
    x = torch.randn(64, 500, dtype=torch.float64)
    for reg in ("l2", "kl"):
        for name, op in (("soft_sort", torchsort.soft_sort), ("soft_rank", torchsort.soft_rank)):
            cpu = op(x, regularization=reg, regularization_strength=0.5)  # the wheel's own C++ path
            gpu = op(x.to(CUDA), regularization=reg, regularization_strength=0.5)  # its CUDA kernel
            out.append(close(f"{name} {reg} cuda vs cpu", gpu, cpu, 1e-9))
    # The hard limit against plain torch: well-separated values, a strength far below their gaps.
    y = torch.randperm(200, dtype=torch.float64).reshape(4, 50)
    ranks = torchsort.soft_rank(y.to(CUDA), regularization_strength=1e-3)
    out.append(close("soft_rank (strength 1e-3) cuda vs torch's rank", ranks, y.argsort(1).argsort(1) + 1.0, 1e-6))
    sorted_ = torchsort.soft_sort(y.to(CUDA), regularization_strength=1e-3)
    out.append(close("soft_sort (strength 1e-3) cuda vs torch.sort", sorted_, y.sort().values, 1e-6))
    return out


CHECKS: dict[str, Callable[[], list[str]]] = {"torch_spline_conv": spline_conv, "torchsort": torchsort_checks}


def main(names: list[str]) -> int:
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) on {torch.cuda.get_device_name(0)}")
    failed = 0
    for name in names:
        module = __import__(name)
        print(f"{name} {getattr(module, '__version__', '?')} from {module.__file__}")
        started = time.perf_counter()
        try:
            lines = CHECKS[name]()
        except Exception as exc:  # one line per failed package, then the rest still runs
            print(f"FAIL {name}: {type(exc).__name__}: {exc}")
            failed += 1
            continue
        for line in lines:
            print(f"  ok  {line}")
        print(f"  {name}: {len(lines)} checks passed in {time.perf_counter() - started:.2f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
