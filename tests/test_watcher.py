"""Issue 50's watcher against the recorded indexes (tests/fixtures/watch): PyPI as it was on 2026-11-27 (torch
2.15.0 its newest release, not in the catalog) and a hand-made PyTorch index with 2.15.0's variants."""

from __future__ import annotations

from typing import Any

from tests.watch_support import LOCKS, Cell, cells_of, run_tick, stack_toolkit, state, subscription
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.catalog.derived import with_derived
from wheelfoundry.config import load_config
from wheelfoundry.planning.planning import plan_request
from wheelfoundry.request.request import parse_request
from wheelfoundry.watch.watcher import Start, Tick

# torch 2.15.0 as the fixtures publish it: Python 3.11-3.15 on PyPI; cpu, cu126, cu130, cu132 on x86_64 in
# PyTorch's index. The subscription asks 3.10-3.13; CUDA 13.2 has no lock in this deployment.
NEW_RELEASE = {("2.15.0", v, p, "x86_64") for v in ("cpu", "12.6", "13.0") for p in ("3.11", "3.12", "3.13")}


def planned_cells(start: Start, tick: Tick) -> set[Cell]:
    """The cells Validate would plan from the run's request (the catalog plus the derived releases)."""
    catalog = with_derived(load_catalog(), tick.derived)
    plan = plan_request(parse_request(start.request, catalog, load_config()), catalog, load_config())
    return {
        (c.torch_version, c.cuda or "cpu", c.python, job.platform)
        for job in plan.jobs
        for c in (job.extension.cells if job.extension else ())
    }


def everything_but(release: str) -> dict[str, Any]:
    """A channel with every cell of torch-scatter 2.1.2 a first tick would build, except ``release``'s."""
    first = run_tick([subscription()])
    (cells,) = cells_of(first)
    return state("torch-scatter", "2.1.2", {c for c in cells if c[0] != release})


def test_a_new_torch_release_starts_one_run_with_exactly_its_missing_cells() -> None:
    result = run_tick([subscription()], everything_but("2.15.0"))
    (start,) = result.starts
    assert set(start.cells) == NEW_RELEASE
    assert planned_cells(start, result) == NEW_RELEASE  # the request says exactly those cells, no more
    assert start.reason == "torch 2.15.0 released"
    # torch-scatter 2.1.2 has wheels in the channel: the added cells get names of their own
    assert start.request["layout"] == "per-cell" and start.request["local_version"] is True
    assert start.name.startswith("w-torch-scatter-2-1-2-pt215-")
    assert "2.15" in [d.torch for d in result.derived]  # Validate reads these facts (watch/derived.json)


def test_the_next_tick_starts_nothing_once_the_cells_are_published() -> None:
    published = everything_but("2.15.0")
    first = run_tick([subscription()], published)
    (start,) = first.starts
    published["wheels"].update(state("torch-scatter", "2.1.2", start.cells)["wheels"])
    again = run_tick([subscription()], published)
    assert again.starts == []
    assert again.outcomes[0].missing == 0 and again.outcomes[0].covered > len(NEW_RELEASE)


def test_the_same_missing_cells_give_the_same_execution_name() -> None:
    published = everything_but("2.15.0")
    assert run_tick([subscription()], published).starts[0].name == run_tick([subscription()], published).starts[0].name


def test_a_release_outside_the_range_is_ignored() -> None:
    result = run_tick([subscription(torch=">=2.11,<2.15")], everything_but("2.15.0"))
    assert result.starts == []
    assert "2.15.0" in result.outcomes[0].ignored and "2.15.0" not in result.outcomes[0].releases


def test_a_release_needing_a_toolkit_nothing_provides_is_reported_by_name() -> None:
    result = run_tick([subscription()], everything_but("2.15.0"))  # the pure tick: no lock step, no record
    problems = result.outcomes[0].problems
    (unlocked,) = [p for p in problems if p.startswith("CUDA 13.2: no toolkit for x86_64 in this deployment")]
    assert "torch 2.12.0, 2.13.0, 2.14.1, 2.15.0" in unlocked and "the stack's watcher locks CUDA 13+" in unlocked
    assert not any(c[1] == "13.2" for s in result.starts for c in s.cells)
    # with the stack's approved 13.2 lock (toolkits/index.json), the same tick builds its cells, one run per release
    locked = run_tick([subscription()], everything_but("2.15.0"), toolkits={"13.2-x86_64": stack_toolkit()})
    runs = {s.reason: {c for c in s.cells if c[1] == "13.2"} for s in locked.starts}
    assert runs["torch 2.15.0 released"] == {("2.15.0", "13.2", p, "x86_64") for p in ("3.11", "3.12", "3.13")}
    assert set(runs) == {f"torch {v} released" for v in ("2.12.0", "2.13.0", "2.14.1", "2.15.0")}
    assert not any("13.2" in p for p in locked.outcomes[0].problems if p.startswith("CUDA"))


def test_a_lock_without_a_compiler_is_named_too() -> None:
    result = run_tick([subscription(cuda=["13.0"])], everything_but("2.15.0"), locks={**LOCKS, "13.0-x86_64": False})
    assert result.starts == []
    assert any(p.startswith("CUDA 13.0: the x86_64 lock has no compiler") for p in result.outcomes[0].problems)


def test_a_new_version_of_the_package_starts_its_cells_for_every_covered_torch() -> None:
    old = run_tick([subscription(source={"pypi": "2.1.1"})])
    (old_cells,) = cells_of(old)
    published = state("torch-scatter", "2.1.1", old_cells)  # 2.1.1 fully published; PyPI's latest is 2.1.2
    result = run_tick([subscription(source={"pypi": "latest"})], published)
    (start,) = result.starts
    assert result.outcomes[0].version == "2.1.2"
    assert {c[0] for c in start.cells} == {"2.11.0", "2.12.0", "2.13.0", "2.14.1", "2.15.0"}
    assert set(start.cells) == old_cells  # the same matrix, for the new version
    assert planned_cells(start, result) == old_cells
    assert start.request["source"] == {"s3": "s3://wf-bucket/sources/pypi/torch-scatter/torch_scatter-2.1.2.tar.gz"}
    assert start.copy is not None and start.copy.sha256 and start.copy.url.endswith("torch_scatter-2.1.2.tar.gz")
    assert "layout" not in start.request  # nothing of 2.1.2 published: the subscription's layout (auto)


def test_catalog_releases_use_the_catalogs_variants_and_every_wanted_python() -> None:
    result = run_tick([subscription(torch="==2.14.*", cuda=["cpu", "12.6"], python=["3.10"])])
    (start,) = result.starts
    assert set(start.cells) == {("2.14.1", "cpu", "3.10", "x86_64"), ("2.14.1", "12.6", "3.10", "x86_64")}


def test_guardrails_refuse_a_run_by_name_and_start_nothing() -> None:
    from tests.watch_support import upstream
    from wheelfoundry.publishing.coverage import Coverage
    from wheelfoundry.watch.watcher import Stack, tick

    subs = [subscription()]
    small = load_config().with_guardrails(1, 250, 10)
    result = tick(
        subs, upstream(subs=subs), {"extensions": Coverage(())}, Stack("wf-bucket", load_catalog(), small, LOCKS)
    )
    assert result.starts == []
    assert any("GuardrailExceeded" in p for p in result.outcomes[0].problems)


def test_a_pinned_release_missing_from_pypi_is_a_problem_not_a_run() -> None:
    result = run_tick([subscription(source={"pypi": "9.9.9"})])
    assert result.starts == []
    assert result.outcomes[0].problems[-1].startswith("torch-scatter 9.9.9: no such sdist on PyPI (newest:")


def test_a_subscription_s_abi_reaches_the_run_it_starts() -> None:
    """``abi: stable`` in a subscription is passed on: the run's Validate refuses what the range cannot take,
    and each cell's abi stage becomes its gate (tests/test_abi_stable_request.py)."""
    result = run_tick([subscription(abi="stable")], everything_but("2.15.0"))
    (start,) = result.starts
    assert start.request["abi"] == "stable"
    plain = run_tick([subscription()], everything_but("2.15.0"))
    assert "abi" not in plain.starts[0].request  # unset: the request's default (auto)
