"""wf-driver-api: the CUDA driver's version and memory, from the driver API (cuDriverGetVersion, cuMemGetInfo).

The compiled module needs libcuda.so.1, the NVIDIA driver: it is imported on first use, so that this
package imports on a machine without a driver (a build host) and fails only when asked for the driver.
"""

from __future__ import annotations

from typing import Any

import torch


def _c() -> Any:
    import importlib

    return importlib.import_module("wf_driver_api._C")  # libcuda.so.1 is loaded here: this machine's driver


def driver_version() -> int:
    """The driver's CUDA version, e.g. 13000 for a CUDA 13.0 driver."""
    return int(_c().driver_version())


def memory_info() -> tuple[int, int]:
    """(free, total) bytes of the current device."""
    torch.empty(0, device="cuda")  # the driver API needs a current context: torch's primary one
    free, total = _c().memory_info()
    return int(free), int(total)


def full(n: int, value: float) -> torch.Tensor:
    """A float32 CUDA tensor of ``n`` values, filled by this extension's own kernel."""
    out = torch.empty(n, device="cuda", dtype=torch.float32)
    _c().fill(out, float(value))
    return out
