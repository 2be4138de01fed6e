"""wf-vecops: vector helpers whose arithmetic runs in a compiled kernel module."""

from __future__ import annotations

from wf_vecops.functional import axpy, built_with, normalize

__all__ = ["axpy", "built_with", "normalize"]
