"""A cached build environment's name (wfbuild.envs.cache_key) holds where pip looked.

With the host's pip configuration (``torch_index: pip``) a run that points pip's find-links elsewhere (the
stable CUDA test: PyPI's CUDA build of torch 2.13.0 rather than a CPU file of it in the host's find-links) asks
for the same ``torch==2.13.0`` as one that does not. Keyed on the spec alone, whichever ran first decided the
other's torch: a CUDA cell then failed its CUDA check, or a CPU cell got a CUDA torch.
"""

from __future__ import annotations

import sys

from wfbuild.envs import cache_key


def _key(**environ: str) -> str:
    return cache_key(sys.executable, ["setuptools"], None, "torch==2.13.0", None, "", environ)


def test_where_pip_looks_is_part_of_the_name_and_other_pip_settings_are_not() -> None:
    base = _key()
    assert _key(PIP_FIND_LINKS="/srv/no-wheels") != base
    assert _key(PIP_INDEX_URL="https://example.invalid/simple") != base
    assert _key(PIP_CONSTRAINT="/dev/null") != base
    assert _key(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_DEFAULT_TIMEOUT="180") == base
