"""What can be built: the compatibility catalog and the torch releases it does not list yet.

Entry points: ``catalog.load_catalog`` (``data/catalog.toml`` as frozen dataclasses: releases, their CUDA
toolkits, libraries), ``resolve.resolve_version`` (a release, nightly, branch, tag or commit against it),
``derived.with_derived`` (releases known from their published wheels), ``upstream_index`` (PyPI's and
PyTorch's indexes of torch, parsed), ``wheel_metadata`` and ``remote_wheel`` (a published wheel read in part).
Imports nothing of the package but ``errors`` and ``config``.
"""
