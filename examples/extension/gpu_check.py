"""Run the CUDA kernels on a GPU against pure torch (a script, not a test: CI has no GPU).

python gpu_check.py      # exit 0 when every check passes; prints what it checked
"""

from __future__ import annotations

import sys

import torch
import wf_example_ops


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device visible", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) on {torch.cuda.get_device_name(device)}")
    gen = torch.Generator(device=device).manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        for shape in ((0,), (7,), (1000, 333), (5_000_000,)):
            a = torch.randn(shape, generator=gen, device=device, dtype=dtype)
            b = torch.randn(shape, generator=gen, device=device, dtype=dtype)
            torch.testing.assert_close(wf_example_ops.scaled_add(a, b, 0.25), a + 0.25 * b)
            torch.testing.assert_close(wf_example_ops.relu_square(a), torch.relu(a) ** 2)
            print(f"  ok  {dtype!s:14} {shape!s:14} scaled_add, relu_square")
    for dtype in (torch.float32, torch.float64):
        for m, k, n in ((1, 1, 1), (64, 32, 16), (257, 129, 65), (1024, 1024, 1024)):
            a = torch.randn(m, k, generator=gen, device=device, dtype=dtype)
            b = torch.randn(k, n, generator=gen, device=device, dtype=dtype)
            got, want = wf_example_ops.matmul(a, b), a @ b  # the same cuBLAS, through torch's handle
            torch.testing.assert_close(got, want)
            print(
                f"  ok  {dtype!s:14} {(m, k, n)!s:18} matmul (cuBLAS), max |diff| {(got - want).abs().max().item():.3g}"
            )
    x = torch.arange(12, device=device, dtype=torch.float32).reshape(3, 4).t() - 5.0  # non-contiguous
    torch.testing.assert_close(wf_example_ops.relu_square(x), torch.relu(x) ** 2)
    big = torch.randn(1 << 24, device=device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    wf_example_ops.relu_square(big)
    start.record()
    for _ in range(20):
        wf_example_ops.relu_square(big)
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / 20
    print(f"  relu_square on 2^24 float32: {ms:.3f} ms ({2 * big.numel() * 4 / ms / 1e6:.0f} GB/s)")
    print("all GPU checks passed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
