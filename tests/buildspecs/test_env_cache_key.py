"""A cached build environment's name (wfbuild.envs.cache_key) holds what decides the torch inside it.

With the host's pip configuration (``torch_index: pip``) a CPU cell and a CUDA cell ask pip for the same
``torch==2.13.0``; a find-links folder holding PyTorch's CPU file of that release makes pip pick it over PyPI's
CUDA build. Keyed on the spec alone, whichever cell ran first decided the other's torch: a CUDA cell then failed
its CUDA check, or a CPU cell silently got a CUDA torch.
"""

from __future__ import annotations

import sys

from wfbuild.envs import cache_key


def _key(expect_cuda: str | None = None, **environ: str) -> str:
    return cache_key(sys.executable, ["setuptools"], None, "torch==2.13.0", None, "", expect_cuda, environ)


def test_a_cuda_cells_environment_is_not_a_cpu_cells_of_the_same_torch() -> None:
    assert _key("13.0") != _key(None)
    assert _key("13.0") != _key("12.8")
    assert _key("13.0") == _key("13.0")


def test_where_pip_looks_is_part_of_the_name_and_other_pip_settings_are_not() -> None:
    base = _key()
    assert _key(PIP_FIND_LINKS="/srv/no-wheels") != base
    assert _key(PIP_INDEX_URL="https://example.invalid/simple") != base
    assert _key(PIP_CONSTRAINT="/dev/null") != base
    assert _key(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_DEFAULT_TIMEOUT="180") == base
