"""torch-harmonics: the C++ DISCO convolution and neighbourhood attention against its plain-torch path.

Four Python extension modules in one wheel: two top-level ones (disco_helpers, attention_helpers,
imported by name from anywhere) and torch_harmonics/disco/_C and torch_harmonics/attention/_C. The same
modules with ``optimized_kernel=False`` compute with plain torch (sparse/dense matmuls): that is the reference.
"""

from __future__ import annotations

import sys

import attention_helpers
import disco_helpers
import torch
import torch_harmonics as th
from _check import close, main


def check_kernels_present() -> None:
    for helpers in (disco_helpers, attention_helpers):
        if not helpers.optimized_kernels_is_available():
            raise AssertionError(f"{helpers.__name__}: the C++ kernels were not built into this wheel")
    print("ok   disco_helpers and attention_helpers: C++ kernels available")


def pair(make: type, *args: object, **kwargs: object) -> tuple[torch.nn.Module, torch.nn.Module]:
    reference = make(*args, optimized_kernel=False, **kwargs)
    optimized = make(*args, optimized_kernel=True, **kwargs)
    # The parameters only: the two paths keep the filter (psi) in buffers of different formats.
    with torch.no_grad():
        for (name, mine), (other, theirs) in zip(
            optimized.named_parameters(), reference.named_parameters(), strict=True
        ):
            assert name == other, (name, other)
            mine.copy_(theirs)
    if not optimized.optimized_kernel or reference.optimized_kernel:
        raise AssertionError(f"{make.__name__}: optimized_kernel did not select the C++ path")
    return reference, optimized


def compare(what: str, reference: torch.nn.Module, optimized: torch.nn.Module, *inputs: torch.Tensor) -> None:
    ref_in = [t.clone().requires_grad_() for t in inputs]
    opt_in = [t.clone().requires_grad_() for t in inputs]
    want, got = reference(*ref_in), optimized(*opt_in)
    close(f"{what} forward", got, want, atol=1e-5, rtol=1e-4)
    grad = torch.randn_like(want)
    want.backward(grad)
    got.backward(grad)
    for i, (a, b) in enumerate(zip(opt_in, ref_in, strict=True)):
        assert a.grad is not None and b.grad is not None
        close(f"{what} backward (input {i})", a.grad, b.grad, atol=1e-5, rtol=1e-4)


def check_disco() -> None:
    for make, shapes in (
        (th.DiscreteContinuousConvS2, ((16, 32), (8, 16))),
        (th.DiscreteContinuousConvTransposeS2, ((8, 16), (16, 32))),
    ):
        reference, optimized = pair(make, 3, 4, shapes[0], shapes[1], kernel_shape=(3, 3))
        compare(make.__name__, reference, optimized, torch.randn(2, 3, *shapes[0]))


def check_attention() -> None:
    reference, optimized = pair(th.NeighborhoodAttentionS2, 4, (6, 12), (6, 12), num_heads=2, out_channels=4)
    q, k, v = (torch.randn(2, 4, 6, 12) for _ in range(3))
    compare("NeighborhoodAttentionS2", reference, optimized, q, k, v)


if __name__ == "__main__":
    sys.exit(main([check_kernels_present, check_disco, check_attention]))
