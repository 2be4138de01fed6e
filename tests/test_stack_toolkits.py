"""The stack's toolkit record (wheelfoundry.toolkits.stack_toolkits, toolkits/index.json): built, merged, validated
whole (an entry failing any check is ignored with its reason), and its rows never over a committed one."""

from __future__ import annotations

import json

import pytest

from tests.watch_support import LOCKS, stack_toolkit
from wheelfoundry.catalog.catalog import load_catalog
from wheelfoundry.toolkits import stack_toolkits
from wheelfoundry.toolkits.toolkit_row import Facts, upstream_or_assumed
from wheelfoundry.watch.watch_facts import lock_problem


def raw(**changes: object) -> dict[str, object]:
    entry = stack_toolkit().to_json()
    return {**entry, **changes}


def test_an_entry_is_content_addressed_and_reads_back_as_written() -> None:
    entry = stack_toolkit()
    assert entry.key == f"toolkits/cuda-13.2-x86_64-{entry.sha256[:16]}.toml" and len(entry.sha256) == 64
    assert entry.row.toolkit == "13.2.2" and entry.row.requirements == ("nvidia-cublas==13.4.1.3",)
    assert entry.sources["archs"].startswith("assumed from CUDA 13.0's row")  # the stop-gap facts say so
    record, problems = stack_toolkits.parse(stack_toolkits.body({entry.name: entry}))
    assert problems == [] and record == {"13.2-x86_64": entry}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"key": "toolkits/../bundles/current.json"}, "13.2-x86_64.key"),
        ({"sha256": "0" * 64}, "13.2-x86_64.sha256"),
        ({"approved": "yes"}, "13.2-x86_64.approved"),
        ({"row": {**raw()["row"], "default_arch_list": "7.5;99.0"}}, "13.2-x86_64.row.default_arch_list"),  # type: ignore[dict-item]
        ({"row": {**raw()["row"], "gcc_max": "15"}}, "13.2-x86_64.row.gcc_max"),  # type: ignore[dict-item]
        ({"row": {**raw()["row"], "env": {"lower; rm -rf": "1"}}}, "13.2-x86_64.row.env"),  # type: ignore[dict-item]
        ({"row": {**raw()["row"], "toolkit": "13.0.2"}}, "13.2-x86_64.row"),  # type: ignore[dict-item]
    ],
)
def test_an_entry_failing_any_check_is_ignored_whole_with_its_reason(change: dict[str, object], field: str) -> None:
    good = stack_toolkit(platform="aarch64")
    body = json.dumps({"format": 1, "toolkits": {"13.2-x86_64": raw(**change), good.name: good.to_json()}})
    record, problems = stack_toolkits.parse(body.encode())
    assert record == {good.name: good}  # the valid one is kept, the other not in part
    (problem,) = problems
    assert problem.startswith(f"toolkits/index.json: ignored: {field}")


def test_a_record_that_is_not_one_is_ignored() -> None:
    assert stack_toolkits.parse(b"[]")[0] == {} and stack_toolkits.parse(b"not json")[0] == {}


def test_rows_are_added_only_for_cuda_versions_the_catalog_lacks_and_only_approved() -> None:
    catalog = load_catalog()
    assert "13.2" not in catalog.cuda  # issue 64 item 5: the repository keeps no 13.2
    x86, arm = stack_toolkit(), stack_toolkit(platform="aarch64")
    added = stack_toolkits.with_stack_toolkits(catalog, {x86.name: x86, arm.name: arm})
    assert added.cuda["13.2"].platforms == ("x86_64", "aarch64") and added.cuda["13.2"].toolkit == "13.2.2"
    waiting = stack_toolkit(approved=False)
    assert "13.2" not in stack_toolkits.with_stack_toolkits(catalog, {waiting.name: waiting}).cuda
    # never over a committed row: a stack entry for 13.0 leaves the catalog's 13.0 as it is
    ours = stack_toolkit(cuda="13.0")
    assert stack_toolkits.with_stack_toolkits(catalog, {ours.name: ours}).cuda["13.0"] == catalog.cuda["13.0"]


def test_merge_and_approve() -> None:
    waiting = stack_toolkit(approved=False)
    record = stack_toolkits.merge({}, [waiting])
    assert stack_toolkits.approve(record, "13.2", ["aarch64"], "now") == []
    (flipped,) = stack_toolkits.approve(record, "13.2", [], "now")
    assert flipped.approved and flipped.sha256 == waiting.sha256 and "approved now" in flipped.reason
    assert stack_toolkits.merge(record, [flipped])["13.2-x86_64"].approved


def test_the_locks_views_accept_approved_stack_locks_and_the_bundles_win() -> None:
    entry, waiting = stack_toolkit(), stack_toolkit(platform="aarch64", approved=False)
    record = {entry.name: entry, waiting.name: waiting}
    locks = stack_toolkits.locks_view(LOCKS, record)
    assert locks is not None and locks["13.2-x86_64"] is True and "13.2-aarch64" not in locks
    catalog = stack_toolkits.with_stack_toolkits(load_catalog(), record)
    assert lock_problem("13.2", "x86_64", catalog, locks) is None
    notes = stack_toolkits.waiting(record)
    assert notes["13.2-aarch64"].endswith("awaiting approval: wheelfoundry toolkits approve 13.2 --platform aarch64")
    pins = stack_toolkits.with_stack_pins({"cuda": {"13.0-x86_64": {"compiler": True}}}, record)
    assert pins is not None and pins["cuda"]["13.2-x86_64"]["requirements"] == ["nvidia-cublas==13.4.1.3"]
    assert stack_toolkits.contract_lock(record, {"13.2-x86_64": {}}, "13.2", "x86_64") is None  # the bundle's
    assert stack_toolkits.contract_lock(record, {}, "13.2", "x86_64") == {"key": entry.key, "sha256": entry.sha256}


def test_only_an_extension_request_naming_a_cuda_the_catalog_lacks_reads_the_record() -> None:
    catalog = load_catalog()
    assert stack_toolkits.wanted({"framework": "extension", "cuda": ["cpu", "13.2"]}, catalog)
    assert not stack_toolkits.wanted({"framework": "extension", "cuda": ["13.0"]}, catalog)
    assert not stack_toolkits.wanted({"framework": "pytorch", "cuda": ["13.2"]}, catalog)


def test_facts_are_read_from_upstream_and_only_assumed_where_it_cannot_be_read_saying_why() -> None:
    read = Facts(("9.0", "10.0"), "9.0;10.0", 15, {}, {"default_arch_list": "torch wheel's arch flags"})
    facts = upstream_or_assumed(lambda cuda, platform, torch: read, load_catalog())
    assert facts("13.2", "x86_64", "2.15.0") is read

    def down(cuda: str, platform: str, torch: str) -> Facts:
        raise OSError("files.pythonhosted.org: timed out")

    found = upstream_or_assumed(down, load_catalog())("13.2", "x86_64", "2.15.0")
    row = load_catalog().cuda["13.0"]
    assert (found.default_arch_list, found.gcc_max) == (row.default_arch_list, row.gcc_max)
    assert found.sources and all(
        v.startswith("upstream not read (files.pythonhosted.org: timed out); assumed from CUDA 13.0's row")
        for v in found.sources.values()
    ), found.sources
