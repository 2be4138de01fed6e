"""The public channels' distribution as the template declares it, served by the local edge: the bucket
policy's grant, the viewer-request function (QuickJS running the template's JavaScript), caching by each
object's Cache-Control and the invalidations PublishIndex makes. No build: pages and wheels are written
here and published with the real publish_index."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import TEMPLATE, http_get
from wheelfoundry.publishing.edge import NOT_FOUND, WHEEL_CACHE, Edge, site_pages
from wheelfoundry.publishing.index import publish_index
from wheelfoundry_local import DeployedStack, EmbeddedAws, cfn_edge
from wheelfoundry_local.cfn_yaml import load_template
from wheelfoundry_local.edge import LocalEdge, serving_edge
from wheelfoundry_local.edge_rules import object_key, policy_allows, viewer_request

WHEEL = "wf_probe-1.0+pt213cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


@pytest.fixture
def public(aws: EmbeddedAws) -> Iterator[tuple[DeployedStack, LocalEdge]]:
    stack = aws.deploy(TEMPLATE, {"PublicChannels": "ci,nightly"})
    with serving_edge(aws, stack) as edge:
        yield stack, edge


def put_wheel(aws: EmbeddedAws, stack: DeployedStack, channel: str, name: str = WHEEL) -> str:
    key = f"wheels/{channel}/wf-probe/{name}"
    meta = {"sha256": "ab" * 32, "wf-variants": "torch-2.13.0+cpu"}
    aws.client("s3").put_object(
        Bucket=stack.outputs["WheelBucketName"],
        Key=key,
        Body=b"PK\x05\x06" + b"\0" * 18,
        Metadata=meta,
        CacheControl=WHEEL_CACHE,
    )
    # Its PEP 658 METADATA pins torch 2.13, as every cell wheel's does: the channel-wide page may list it.
    metadata = b"Metadata-Version: 2.1\nName: wf-probe\nVersion: 1\nRequires-Dist: torch<2.14,>=2.13\n"
    aws.client("s3").put_object(
        Bucket=stack.outputs["WheelBucketName"],
        Key=f"{key}.metadata",
        Body=metadata,
        Metadata={"sha256": hashlib.sha256(metadata).hexdigest()},
    )
    return key


def publish(aws: EmbeddedAws, stack: DeployedStack, channel: str) -> dict[str, Any]:
    lam = aws.client("lambda")
    name = stack.function_name("PublishIndexFunction")
    env = lam.get_function_configuration(FunctionName=name)["Environment"]["Variables"]
    clients = {"cloudfront": aws.client("cloudfront"), "kms": aws.client("kms")}
    return publish_index(
        aws.client("s3"), stack.outputs["WheelBucketName"], channel, public=Edge.from_environ(env), clients=clients
    )


def test_only_the_public_channels_and_the_key_are_served(
    aws: EmbeddedAws, public: tuple[DeployedStack, LocalEdge]
) -> None:
    stack, edge = public
    for channel in ("ci", "nightly", "private"):
        put_wheel(aws, stack, channel)
        publish(aws, stack, channel)
    key = publish(aws, stack, "ci")["edge"]["key_fingerprint"]
    served = [
        "/simple/ci/",
        "/simple/nightly/wf-probe/",
        f"/wheels/ci/wf-probe/{WHEEL.replace('+', '%2B')}",
        f"/keys/{key}.pem",
    ]
    for path in served:
        assert http_get(edge.url + path)[0] == 200, path
    bucket = stack.outputs["WheelBucketName"]
    policy = cfn_edge.bucket_policy(bucket)
    for path in [
        "/simple/private/",
        f"/wheels/private/wf-probe/{WHEEL.replace('+', '%2B')}",
        "/simple/ci/.index-state.json",
        "/bundles/current.json",
    ]:
        # The bucket policy refuses the distribution (S3 would say 403): from outside it looks missing.
        key = object_key(path if not path.endswith("/") else path + "index.html")
        assert not policy_allows(policy, "s3:GetObject", f"arn:aws:s3:::{bucket}/{key}", edge.distribution.arn), path
        status, headers, body = http_get(edge.url + path)
        assert (status, headers["X-Cache"]) == (404, "Error from cloudfront"), path
        assert body == site_pages(["ci", "nightly"])[NOT_FOUND].encode(), path
    assert http_get(edge.url + "/simple/ci/", None)[0] == 200
    request = urllib.request.Request(edge.url + "/simple/ci/", method="POST", data=b"x")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request)
    assert refused.value.code == 403  # GET and HEAD only


def test_json_or_html_by_accept_and_plus_signs_reach_their_keys(
    aws: EmbeddedAws, public: tuple[DeployedStack, LocalEdge]
) -> None:
    stack, edge = public
    put_wheel(aws, stack, "ci")
    publish(aws, stack, "ci")
    page = f"{edge.url}/simple/ci/wf-probe/"
    for accept, kind in [
        (None, "text/html"),
        ("application/vnd.pypi.simple.v1+json", "application/vnd.pypi.simple.v1+json"),
        ("application/vnd.pypi.simple.latest+json, text/html;q=0.01", "application/vnd.pypi.simple.v1+json"),
        ("text/html, application/vnd.pypi.simple.v1+json;q=0.2", "text/html"),
        ("application/vnd.pypi.simple.v1+json;q=0", "text/html"),
        ("*/*", "text/html"),
    ]:
        status, headers, body = http_get(page, accept)
        assert status == 200 and headers["Content-Type"].startswith(kind), accept
    data = json.loads(http_get(page, "application/vnd.pypi.simple.v1+json")[2])
    assert data["files"][0]["url"] == f"../../../wheels/ci/wf-probe/{WHEEL.replace('+', '%2B')}"
    for spelled in ("torch-2.13.0%2Bcpu.html", "torch-2.13.0+cpu.html"):
        status, _, body = http_get(f"{edge.url}/simple/ci/{spelled}")
        assert status == 200 and WHEEL.replace("+", "%2B").encode() in body, spelled


def test_a_publish_invalidates_what_it_changed_and_nothing_else(
    aws: EmbeddedAws, public: tuple[DeployedStack, LocalEdge]
) -> None:
    stack, edge = public
    put_wheel(aws, stack, "ci")
    first = publish(aws, stack, "ci")["edge"]
    assert first["invalidated"] == ["/simple/ci/*"]  # every spelling of every page: one path
    page = f"{edge.url}/simple/ci/wf-probe/"
    assert http_get(page)[1]["X-Cache"] == "Miss from cloudfront"
    assert http_get(page)[1]["X-Cache"] == "Hit from cloudfront"
    wheel = f"{edge.url}/wheels/ci/wf-probe/{WHEEL.replace('+', '%2B')}"
    status, headers, _ = http_get(wheel)
    assert status == 200 and headers["Cache-Control"] == "public, max-age=31536000, immutable"
    assert publish(aws, stack, "ci")["edge"]["invalidated"] == []  # nothing changed: nothing to invalidate
    newer = WHEEL.replace("1.0+", "1.1+")
    put_wheel(aws, stack, "ci", newer)
    second = publish(aws, stack, "ci")["edge"]
    assert second["invalidated"] == ["/simple/ci/*"]
    status, headers, body = http_get(page)
    assert headers["X-Cache"] == "Miss from cloudfront" and newer.replace("+", "%2B").encode() in body
    assert http_get(wheel)[1]["X-Cache"] == "Hit from cloudfront"  # wheels are never invalidated
    listed = aws.client("cloudfront").list_invalidations(DistributionId=edge.distribution.id)["InvalidationList"]
    assert listed["Quantity"] == 2


def _function_code() -> str:
    return str(load_template(TEMPLATE)["Resources"]["EdgeIndexFunction"]["Properties"]["FunctionCode"])


@pytest.mark.parametrize(
    ("uri", "accept", "expected"),
    [
        ("/simple/ci/", None, "/simple/ci/index.html"),
        ("/simple/ci/x/", "application/vnd.pypi.simple.v1+json", "/simple/ci/x/index.v1.json"),
        ("/simple/ci/torch-2.14.0+cu130.html", None, "/simple/ci/torch-2.14.0%2Bcu130.html"),
        (
            "/wheels/ci/x/x-1.0-py3-none-any.whl",
            "application/vnd.pypi.simple.v1+json",
            "/wheels/ci/x/x-1.0-py3-none-any.whl",
        ),
    ],
)
def test_the_templates_function_maps_each_request(uri: str, accept: str | None, expected: str) -> None:
    headers = {"accept": accept} if accept else {}
    assert viewer_request(_function_code(), "GET", uri, headers, "D1")["uri"] == expected


def test_nothing_public_without_public_channels(aws: EmbeddedAws) -> None:
    stack = aws.deploy(TEMPLATE)
    assert "PublicIndexUrl" not in stack.outputs and "EdgeDistribution" not in stack.resources
    with pytest.raises(LookupError, match="PublicChannels"), serving_edge(aws, stack):
        pass


def test_the_template_refuses_a_fifth_channel_or_a_bad_name() -> None:
    import re

    pattern = re.compile(load_template(TEMPLATE)["Parameters"]["PublicChannels"]["AllowedPattern"])
    assert pattern.fullmatch("") and pattern.fullmatch("release,nightly,ci,demo")
    for bad in ("a,b,c,d,e", "Release", "a, b", "a,,b", "../x"):
        assert not pattern.fullmatch(bad), bad
