"""Compiled kernels: ``_C`` is built from csrc/vecops.cpp."""
