"""What every corpus check shares: compare with a plain-torch reference, print one line per op.

A check runs in the fresh venv the wheel was installed into (torch and the wheel only), as
``python examples/corpus/checks/check_<package>.py``; this folder is then on sys.path, the repository
is not. (Not ``<package>.py``: the script's folder comes first on sys.path, the check would import itself.)
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch


def close(what: str, got: torch.Tensor, want: torch.Tensor, atol: float = 1e-6, rtol: float = 1e-5) -> None:
    """Raise unless ``got`` matches the reference ``want`` (shape, dtype and values within tolerances)."""
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {tuple(got.shape)}, the reference has {tuple(want.shape)}")
    if got.dtype != want.dtype:
        raise AssertionError(f"{what}: dtype {got.dtype}, the reference has {want.dtype}")
    if got.is_floating_point():
        err = (got - want).abs().max().item() if got.numel() else 0.0
        if not torch.allclose(got, want, atol=atol, rtol=rtol):
            raise AssertionError(f"{what}: max |difference| {err:.3g} exceeds atol {atol:g} + rtol {rtol:g}")
        print(f"ok   {what}: max |difference| {err:.3g} (atol {atol:g}, rtol {rtol:g})")
    else:
        wrong = int((got != want).sum())
        if wrong:
            raise AssertionError(f"{what}: {wrong} of {got.numel()} values differ from the reference")
        print(f"ok   {what}: all {got.numel()} values equal")


def main(checks: list[Callable[[], None]]) -> int:
    """Run every check (a failed one does not hide the others); exit status 1 if any failed."""
    torch.manual_seed(0)
    failed = 0
    for check in checks:
        try:
            check()
        except Exception as exc:
            failed += 1
            print(f"FAIL {check.__name__}: {type(exc).__name__}: {exc}")
    print(f"{len(checks) - failed} of {len(checks)} checks passed (torch {torch.__version__})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit("run a package's check, not this module")
