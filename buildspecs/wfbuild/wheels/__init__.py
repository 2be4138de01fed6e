"""Wheel tools: build one (``wheel_build``), repair it for manylinux (``repair``), make it reproducible
(``reproducible``), read and rewrite it (``wheelfile``), and read what it holds (``libs``, ``built_here``,
``abi`` and ``shims``: stable ABI or per torch, and the floor; ``versions``). Stands on the ground alone.
"""
