"""An extension request's exclude: a matrix that is not a full cross product, checked as strictly as the rest."""

from __future__ import annotations

from itertools import product
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.config import load_config
from wheelfoundry.errors import RequestInvalid
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.exclusions import KEYS, cover, excluded
from wheelfoundry.request.request import parse_request

BASE: dict[str, Any] = {
    "framework": "extension",
    "name": "wf-ext",
    "source": {"s3": "s3://bucket/sources/wf_ext-1.0.tar.gz"},
    "torch": ["2.11", "2.12"],
    "cuda": ["cpu", "12.8"],
    "python": ["3.11", "3.12"],
}


def cells(raw: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    catalog, config = load_catalog(), load_config()
    plan = plan_request(parse_request(raw, catalog, config), catalog, config)
    return {
        (c.torch_version, c.cuda or "cpu", c.python, job.platform)
        for job in plan.jobs
        for c in (job.extension.cells if job.extension else ())
    }


def test_a_cuda_a_release_lacks_is_refused_unless_every_cell_of_it_is_excluded() -> None:
    with pytest.raises(RequestInvalid, match=r"cuda\[1\]: .*CUDA 12.8 is not available for torch 2.12"):
        parse_request(BASE)
    raw = {**BASE, "exclude": [{"torch": "2.12", "cuda": "12.8"}]}
    assert cells(raw) == {
        *{("2.11.0", v, p, "x86_64") for v in ("cpu", "12.8") for p in ("3.11", "3.12")},
        *{("2.12.0", "cpu", p, "x86_64") for p in ("3.11", "3.12")},
    }
    partly = {**BASE, "exclude": [{"torch": "2.12", "cuda": "12.8", "python": "3.11"}]}  # 3.12 still asks for it
    with pytest.raises(RequestInvalid, match=r"CUDA 12\.8 is not available for torch 2\.12"):
        parse_request(partly)


def test_a_python_a_release_lacks_is_refused_unless_excluded_for_it() -> None:
    raw = {**BASE, "torch": ["2.8", "2.11"], "cuda": ["cpu"], "python": ["3.9", "3.11"]}
    with pytest.raises(RequestInvalid, match=r"python\[0\]: Python 3.9 is not supported by torch 2.11"):
        parse_request(raw)
    kept = cells({**raw, "exclude": [{"torch": "2.11", "python": "3.9"}]})
    assert ("2.8.0", "cpu", "3.9", "x86_64") in kept and ("2.11.0", "cpu", "3.9", "x86_64") not in kept


def test_single_cells_are_left_out() -> None:
    raw = {
        **BASE,
        "cuda": ["cpu"],
        "exclude": [{"torch": "2.11", "cuda": "cpu", "python": "3.12", "platform": "x86_64"}],
    }
    assert ("2.11.0", "cpu", "3.12", "x86_64") not in cells(raw) and len(cells(raw)) == 3


def test_entries_name_values_of_the_requests_own_lists() -> None:
    with pytest.raises(RequestInvalid) as info:
        parse_request({**BASE, "cuda": ["cpu"], "exclude": [{"torch": "2.13", "platform": "aarch64"}]})
    paths = {i.path for i in info.value.issues}
    assert paths == {"exclude[0].torch", "exclude[0].platform"}
    with pytest.raises(RequestInvalid, match=r"exclude\[0\]: .*expected at least|exclude\[0\]"):
        parse_request({**BASE, "cuda": ["cpu"], "exclude": [{}]})


def test_excluding_everything_is_refused() -> None:
    with pytest.raises(RequestInvalid, match="exclude: the entries leave out every cell"):
        parse_request({**BASE, "cuda": ["cpu"], "exclude": [{"cuda": "cpu"}]})


def test_a_partial_assignment_is_excluded_only_by_entries_naming_no_more() -> None:
    entries = [{"torch": "2.12", "cuda": "12.8"}]
    assert excluded(entries, torch="2.12", cuda="12.8")
    assert excluded(entries, torch="2.12", cuda="12.8", python="3.11", platform="x86_64")
    assert not excluded(entries, torch="2.12")
    assert not excluded([{"torch": "2.12", "cuda": "12.8", "python": "3.11"}], torch="2.12", cuda="12.8")


AXES = (["2.11", "2.12", "2.13"], ["cpu", "12.6", "13.0"], ["3.10", "3.11"], ["x86_64", "aarch64"])


@settings(max_examples=200, deadline=None)
@given(st.sets(st.sampled_from(list(product(*AXES))), min_size=1))
def test_cover_states_exactly_the_wanted_cells(wanted: set[tuple[str, str, str, str]]) -> None:
    box, entries = cover(wanted, AXES)
    stated = {c for c in product(*box) if not excluded(entries, **dict(zip(KEYS, c, strict=True)))}
    assert stated == wanted
    assert len(entries) <= len(list(product(*box))) - len(wanted)
