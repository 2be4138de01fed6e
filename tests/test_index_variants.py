"""Which wheels each index of a channel lists (issue 65 item 2), yanks (item 4) and names never reused.

The variant index ``simple/<ch>/torch2.11-cu130/`` holds the whole channel as a user of torch 2.11 + cu130
needs it; the channel-wide index holds only what is right for any torch. Rendered from a moto bucket by
publish_index; the resolvers themselves meet these pages in tests/local/test_resolvers.py.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import s3_bucket
from wheelfoundry.errors import PublishedNameReused
from wheelfoundry.publishing import elf
from wheelfoundry.publishing.coverage import served
from wheelfoundry.publishing.index import STATE, YANKED, publish_index
from wheelfoundry.publishing.index_variants import short_name

BUCKET = "wheel-bucket-variants"
PIN = {"2.11": "torch<2.12,>=2.11", "2.12": "torch<2.13,>=2.12"}


@pytest.fixture
def s3() -> Iterator[Any]:
    with s3_bucket(BUCKET) as client:
        yield client


def put(s3: Any, filename: str, variants: str = "", torch: str | None = None, body: bytes = b"") -> str:
    project = re.sub(r"[-_.]+", "-", filename.split("-")[0]).lower()
    key = f"wheels/ci/{project}/{filename}"
    data = body or filename.encode()
    meta = {"sha256": hashlib.sha256(data).hexdigest(), "wf-variants": variants}
    s3.put_object(Bucket=BUCKET, Key=key, Body=data, Metadata=meta)
    metadata = f"Metadata-Version: 2.1\nName: {project}\nVersion: 1\n" + (f"Requires-Dist: {torch}\n" if torch else "")
    digest = hashlib.sha256(metadata.encode()).hexdigest()
    s3.put_object(Bucket=BUCKET, Key=f"{key}.metadata", Body=metadata.encode(), Metadata={"sha256": digest})
    return key


def listed(s3: Any, page: str) -> list[str]:
    body = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{page}index.v1.json")["Body"].read())
    return sorted(f["filename"] for f in body["files"])


TAGS = "cp311-cp311-manylinux_2_28_x86_64.whl"
CELL_211_CU = f"ext-1.0+pt211cu130-{TAGS}"
CELL_211_CPU = f"ext-1.0+pt211cpu-{TAGS}"
CELL_212_CU = f"ext-1.0+pt212cu130-{TAGS}"
MERGED = f"merged_ext-2.0-{TAGS}"
DEP = "helper-1.0-py3-none-any.whl"  # a pure dependency another job of the channel built


def channel(s3: Any) -> dict[str, Any]:
    put(s3, CELL_211_CU, "torch-2.11.0+cu130", PIN["2.11"])
    put(s3, CELL_211_CPU, "torch-2.11.0+cpu", PIN["2.11"])
    put(s3, CELL_212_CU, "torch-2.12.0+cu130", PIN["2.12"])
    put(s3, MERGED, "torch-2.11.0+cu130,torch-2.12.0+cu130", "torch<2.13,>=2.11")
    put(s3, DEP)
    return publish_index(s3, BUCKET, "ci")


def test_short_names_are_one_per_torch_minor_and_variant() -> None:
    assert short_name("torch-2.11.0+cu130") == short_name("torch-2.11.1+cu130") == "torch2.11-cu130"
    assert short_name("torch-2.9.0+cpu") == "torch2.9-cpu"
    with pytest.raises(ValueError, match=r"variant 'torch-2.11.0' is not torch-<version>\+<cpu\|cuNNN>"):
        short_name("torch-2.11.0")


def test_a_variant_index_holds_the_whole_channel_for_its_torch_and_variant(s3: Any) -> None:
    result = channel(s3)
    assert result["variant_indexes"] == ["torch2.11-cpu", "torch2.11-cu130", "torch2.12-cu130"]
    base = "simple/ci/torch2.11-cu130/"
    assert listed(s3, f"{base}ext/") == [CELL_211_CU]  # not 2.11's cpu build, not 2.12's
    assert listed(s3, f"{base}merged-ext/") == [MERGED]
    assert listed(s3, f"{base}helper/") == [DEP]  # a dependency from the same channel resolves
    root = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{base}index.v1.json")["Body"].read())
    assert [p["name"] for p in root["projects"]] == ["ext", "helper", "merged-ext"]
    assert listed(s3, "simple/ci/torch2.11-cpu/ext/") == [CELL_211_CPU]
    cpu_root = json.loads(s3.get_object(Bucket=BUCKET, Key="simple/ci/torch2.11-cpu/index.v1.json")["Body"].read())
    assert [p["name"] for p in cpu_root["projects"]] == ["ext", "helper"]  # the merged wheel has no cpu build
    page = s3.get_object(Bucket=BUCKET, Key=f"{base}ext/")["Body"].read().decode()
    assert 'href="../../../../wheels/ci/ext/ext-1.0%2Bpt211cu130-' in page
    # The older per-variant pages stay as they were (the run report's find-links URLs name them).
    assert listed(s3, "simple/ci/torch-2.11.0+cu130/ext/") == [CELL_211_CU]
    assert s3.head_object(Bucket=BUCKET, Key="simple/ci/torch-2.11.0+cu130.html")


def test_the_channel_wide_index_lists_only_what_a_resolver_can_choose_right(s3: Any) -> None:
    put(s3, f"solo-1.0+pt211cu130-{TAGS}", "torch-2.11.0+cu130", PIN["2.11"])
    put(s3, f"solo-1.0+pt212cu130-{TAGS}", "torch-2.12.0+cu130", PIN["2.12"])
    put(s3, f"unpinned-1.0+pt211cu130-{TAGS}", "torch-2.11.0+cu130")  # built before cell wheels pinned torch
    channel(s3)
    # ext: 2.11 has a cpu and a cu130 build, both pinning torch 2.11, and the 2.12 cu130 build would reach a
    # cpu torch 2.12 user: builds of two variants, none of them on the channel-wide page
    assert listed(s3, "simple/ci/ext/") == []
    assert listed(s3, "simple/ci/solo/") == [f"solo-1.0+pt211cu130-{TAGS}", f"solo-1.0+pt212cu130-{TAGS}"]
    assert listed(s3, "simple/ci/unpinned/") == []  # the project is ours: an empty page, not another index's
    assert listed(s3, "simple/ci/merged-ext/") == [MERGED] and listed(s3, "simple/ci/helper/") == [DEP]


def test_a_yanked_wheel_stays_and_says_so_in_html_and_json(s3: Any) -> None:
    key = put(s3, DEP)
    publish_index(s3, BUCKET, "ci")
    s3.put_object(Bucket=BUCKET, Key=f"{key}{YANKED}", Body=b'run r1: broken "quotes" <b>\n')
    publish_index(s3, BUCKET, "ci")  # the state's cached entry is read again: its .yanked is new
    html = s3.get_object(Bucket=BUCKET, Key="simple/ci/helper/")["Body"].read().decode()
    assert 'data-yanked="run r1: broken &quot;quotes&quot; &lt;b&gt;"' in html
    files = json.loads(s3.get_object(Bucket=BUCKET, Key="simple/ci/helper/index.v1.json")["Body"].read())["files"]
    assert files[0]["yanked"] == 'run r1: broken "quotes" <b>'
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == DEP.encode()
    s3.put_object(Bucket=BUCKET, Key=f"{key}{YANKED}", Body=b"")
    publish_index(s3, BUCKET, "ci")
    files = json.loads(s3.get_object(Bucket=BUCKET, Key="simple/ci/helper/index.v1.json")["Body"].read())["files"]
    assert files[0]["yanked"] is True  # PEP 691: no reason given


def test_a_published_name_never_gets_other_bytes_even_after_a_delete(s3: Any) -> None:
    key = put(s3, DEP)
    publish_index(s3, BUCKET, "ci")
    s3.delete_object(Bucket=BUCKET, Key=key)
    publish_index(s3, BUCKET, "ci")  # gone from the bucket: the state still remembers the name
    state = json.loads(s3.get_object(Bucket=BUCKET, Key=f"simple/ci/{STATE}")["Body"].read())
    assert key in state["published"] and key not in state["wheels"]
    put(s3, DEP, body=b"other bytes")
    with pytest.raises(PublishedNameReused, match=rf"{re.escape(DEP)}: channel 'ci' published it with sha256"):
        publish_index(s3, BUCKET, "ci")
    put(s3, DEP)  # the published bytes back: the channel publishes again
    assert publish_index(s3, BUCKET, "ci")["projects"] == {"helper": 1}


def test_a_yanked_wheel_serves_no_cell_so_the_watcher_builds_it_again() -> None:
    key = "wheels/ci/ext/ext-1.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    entry = {"variants": ["torch-2.12.0+cpu"]}
    assert [(s.minor, s.label) for s in served({"wheels": {key: entry}})] == [("2.12", "cpu")]
    assert served({"wheels": {key: {**entry, "yanked": ""}}}) == []  # yanked with no reason given: still yanked


def test_an_untrusted_so_that_crashes_the_elf_reader_is_not_a_module() -> None:
    header = b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + b"\x03\x00\x3e\x00" + b"\xff" * 200  # absurd offsets and sizes
    assert elf.defined_symbols(header) == frozenset()
    assert elf.defined_symbols(b"\x7fELF") == frozenset()
