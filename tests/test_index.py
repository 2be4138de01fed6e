"""The PEP 503/658 index: rendering, publishing idempotently, and serving to pip."""

from __future__ import annotations

import hashlib
import itertools
import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from wheelfoundry_cli.index_server import object_key, serving

from tests.helpers import s3_bucket
from wheelfoundry.errors import IndexConflict
from wheelfoundry.publishing.index import STATE, IndexFile, publish_index, render_project, render_root

BUCKET = "wheel-bucket-test"


def test_project_page_has_sha256_requires_python_and_metadata() -> None:
    page = render_project(
        "release",
        "torch",
        [IndexFile("torch-2.5.1+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "ab" * 32, ">=3.9", "cd" * 32)],
    )
    assert 'href="../../../wheels/release/torch/torch-2.5.1%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl#sha256=' in page
    assert 'data-requires-python="&gt;=3.9"' in page
    assert f'data-core-metadata="sha256={"cd" * 32}"' in page and "data-dist-info-metadata" in page


def test_root_lists_normalized_projects() -> None:
    page = render_root("release", ["wf-example-ops", "torch"])
    assert re.findall(r'href="([^"]+)"', page) == ["torch/", "wf-example-ops/"]


@pytest.fixture
def s3() -> Iterator[Any]:
    with s3_bucket(BUCKET) as client:
        yield client


def _put_wheel(s3: Any, channel: str, filename: str, body: bytes, requires: str = ">=3.9") -> str:
    project = filename.split("-")[0].replace("_", "-").lower()
    key = f"wheels/{channel}/{project}/{filename}"
    sha = hashlib.sha256(body).hexdigest()
    s3.put_object(Bucket=BUCKET, Key=key, Body=body, Metadata={"sha256": sha, "requires-python": requires})
    meta = b"Metadata-Version: 2.1\nName: x\nVersion: 1\n"
    s3.put_object(
        Bucket=BUCKET, Key=f"{key}.metadata", Body=meta, Metadata={"sha256": hashlib.sha256(meta).hexdigest()}
    )
    return sha


def test_publish_is_idempotent_and_deletes_nothing(s3: Any) -> None:
    sha = _put_wheel(s3, "release", "Wf_Example_Ops-0.1.0+pt213cpu-cp311-cp311-manylinux_2_28_x86_64.whl", b"one")
    first = publish_index(s3, BUCKET, "release")
    assert first["projects"] == {"wf-example-ops": 1}
    page = s3.get_object(Bucket=BUCKET, Key="simple/release/wf-example-ops/")["Body"].read().decode()
    assert f"#sha256={sha}" in page
    same = s3.get_object(Bucket=BUCKET, Key="simple/release/wf-example-ops/index.html")["Body"].read().decode()
    assert same == page
    _put_wheel(s3, "release", "wf_example_ops-0.2.0+pt213cpu-cp311-cp311-manylinux_2_28_x86_64.whl", b"two")
    publish_index(s3, BUCKET, "release")
    page = s3.get_object(Bucket=BUCKET, Key="simple/release/wf-example-ops/")["Body"].read().decode()
    assert "0.1.0" in page and "0.2.0" in page  # another run's wheel is still listed
    assert publish_index(s3, BUCKET, "release") == publish_index(s3, BUCKET, "release")


def test_channels_are_separate(s3: Any) -> None:
    _put_wheel(s3, "nightly", "torch-2.16.0.dev20261122+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", b"n")
    publish_index(s3, BUCKET, "release")
    publish_index(s3, BUCKET, "nightly")
    release_root = s3.get_object(Bucket=BUCKET, Key="simple/release/")["Body"].read().decode()
    assert "torch" not in re.findall(r'href="([^"/]+)/"', release_root)


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("/simple/release/", "simple/release/index.html"),
        ("/simple/release/torch/", "simple/release/torch/index.html"),
        ("/wheels/release/torch/torch-2.5.1%2Bcpu-x.whl", "wheels/release/torch/torch-2.5.1+cpu-x.whl"),
        ("/runs/x/job.json", None),
        ("/simple/../runs/x", None),
        ("/", None),
    ],
)
def test_proxy_maps_only_index_paths(path: str, key: str | None) -> None:
    assert object_key(path) == key


def test_proxy_serves_pages_and_wheels(s3: Any) -> None:
    _put_wheel(s3, "release", "wf_example_ops-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl", b"wheel-bytes")
    publish_index(s3, BUCKET, "release")
    with serving(s3, BUCKET) as base:
        page = urllib.request.urlopen(f"{base}/simple/release/wf-example-ops/").read().decode()
        href = re.search(r'href="([^"#]+)', page)
        assert href is not None
        wheel_url = urllib.request.urljoin(f"{base}/simple/release/wf-example-ops/", href.group(1))
        assert urllib.request.urlopen(wheel_url).read() == b"wheel-bytes"
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{base}/runs/secret.json")
        assert missing.value.code == 404


class _Racing:
    """An S3 client where another run publishes (wheel and whole index) right after this one's first page."""

    def __init__(self, s3: Any, other: Any) -> None:
        self._s3, self._other, self.heads = s3, other, 0

    def put_object(self, **kw: Any) -> Any:
        other, self._other = self._other, None
        result = self._s3.put_object(**kw)
        if other is not None:
            other()
        return result

    def head_object(self, **kw: Any) -> Any:
        self.heads += 1
        return self._s3.head_object(**kw)

    def get_object(self, **kw: Any) -> Any:  # a .metadata is read whole (its torch requirement), not HEADed
        self.heads += kw["Key"].startswith("wheels/")
        return self._s3.get_object(**kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._s3, name)


def test_runs_publishing_into_one_channel_at_once_lose_no_wheel(s3: Any) -> None:
    _put_wheel(s3, "release", "wf_example_ops-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl", b"one")

    def other_run() -> None:  # lands its wheel after this publish listed, and publishes in full
        _put_wheel(s3, "release", "wf_example_ops-0.2.0-cp311-cp311-manylinux_2_28_x86_64.whl", b"two")
        assert publish_index(s3, BUCKET, "release")["attempts"] == 1

    paused: list[int] = []
    result = publish_index(_Racing(s3, other_run), BUCKET, "release", pause=paused.append)
    assert result["attempts"] == 2 and paused == [0]  # its state write lost the race: it listed again
    page = s3.get_object(Bucket=BUCKET, Key="simple/release/wf-example-ops/")["Body"].read().decode()
    assert "0.1.0" in page and "0.2.0" in page


def test_a_publish_that_never_gets_its_turn_fails_naming_the_channel(s3: Any) -> None:
    _put_wheel(s3, "release", "wf_example_ops-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl", b"one")
    publish_index(s3, BUCKET, "release")

    class Busy(_Racing):
        writes = itertools.count()

        def put_object(self, **kw: Any) -> Any:
            if kw["Key"].endswith(STATE):  # someone else always wrote it first
                self._s3.put_object(Bucket=BUCKET, Key=kw["Key"], Body=b'{"n": %d}' % next(self.writes))
            return self._s3.put_object(**kw)

    with pytest.raises(IndexConflict, match="'release' changed under each of 3 attempts"):
        publish_index(Busy(s3, None), BUCKET, "release", attempts=3, pause=lambda _: None)


def test_a_publish_heads_only_the_wheels_the_last_one_did_not_see(s3: Any) -> None:
    for n in range(5):
        _put_wheel(s3, "release", f"wf_example_ops-0.{n}.0-cp311-cp311-manylinux_2_28_x86_64.whl", b"%d" % n)
    first = _Racing(s3, None)
    publish_index(first, BUCKET, "release")
    assert first.heads == 10  # each wheel and its .metadata
    sha = _put_wheel(s3, "release", "wf_example_ops-0.9.0-cp311-cp311-manylinux_2_28_x86_64.whl", b"nine")
    replaced = "wheels/release/wf-example-ops/wf_example_ops-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl.metadata"
    s3.put_object(Bucket=BUCKET, Key=replaced, Body=b"Metadata-Version: 2.1\n", Metadata={"sha256": "ee" * 32})
    second = _Racing(s3, None)
    assert publish_index(second, BUCKET, "release")["projects"] == {"wf-example-ops": 6}
    assert second.heads == 4  # the new wheel and the one whose .metadata changed (its ETag), each with its .metadata
    page = s3.get_object(Bucket=BUCKET, Key="simple/release/wf-example-ops/")["Body"].read().decode()
    assert f"#sha256={sha}" in page and f'data-core-metadata="sha256={"ee" * 32}"' in page
