"""Self-check the build farm runs after installing the wheel (entry point group ``wheelfoundry_smoke``)."""

from __future__ import annotations

import torch

import wf_example_ops


def main() -> None:
    a = torch.tensor([1.0, -2.0, 3.0])
    b = torch.tensor([0.5, 0.5, -1.0])
    got = wf_example_ops.scaled_add(a, b, 2.0)
    if not torch.equal(got, torch.tensor([2.0, -1.0, 1.0])):
        raise AssertionError(f"scaled_add gave {got.tolist()}")
    got = wf_example_ops.relu_square(a)
    if not torch.equal(got, torch.tensor([1.0, 0.0, 9.0])):
        raise AssertionError(f"relu_square gave {got.tolist()}")
    got = wf_example_ops.matmul(a.reshape(3, 1), b.reshape(1, 3))
    if not torch.equal(got, torch.outer(a, b)):
        raise AssertionError(f"matmul gave {got.tolist()}")


if __name__ == "__main__":
    main()
