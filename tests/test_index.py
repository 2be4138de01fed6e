"""The PEP 503/658 index: rendering, publishing idempotently, and serving to pip."""

from __future__ import annotations

import hashlib
import re
import urllib.request
from typing import Any

import boto3
import pytest
from moto import mock_aws
from wheelfoundry_cli.index_server import object_key, serving

from wheelfoundry.index import IndexFile, publish_index, render_project, render_root

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
def s3() -> Any:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
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
