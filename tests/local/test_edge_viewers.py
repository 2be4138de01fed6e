"""The public channels' edge as pip and uv meet it (issue 65): a 404 with a small page wherever nothing may
be read, Vary: Accept on the pages picked by Accept, every viewer spelling of a changed page fresh after a
publish, and a failed invalidation retried rather than forgotten. Served by the local edge from the
deployed template (its function, error responses and bucket policy); no build."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.helpers import TEMPLATE, http_get
from wheelfoundry.errors import EdgeInvalidationFailed
from wheelfoundry.publishing.edge import NOT_FOUND, WHEEL_CACHE, Edge, site_pages
from wheelfoundry.publishing.index import STATE, publish_index
from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_local.edge import LocalEdge, serving_edge

JSON = "application/vnd.pypi.simple.v1+json"
VARIANT = "torch-2.13.0+cpu"
SHORT = "torch2.13-cpu"


@pytest.fixture
def site(aws: EmbeddedAws) -> Iterator[tuple[DeployedStack, LocalEdge]]:
    stack = aws.deploy(TEMPLATE, {"PublicChannels": "ci,nightly"})
    with serving_edge(aws, stack) as edge:
        yield stack, edge


def put_wheel(aws: EmbeddedAws, stack: DeployedStack, channel: str, project: str, version: str) -> str:
    name = f"{project.replace('-', '_')}-{version}+pt213cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    aws.client("s3").put_object(
        Bucket=stack.outputs["WheelBucketName"],
        Key=f"wheels/{channel}/{project}/{name}",
        Body=b"PK\x05\x06" + b"\0" * 18,
        Metadata={"sha256": "ab" * 32, "wf-variants": VARIANT},
        CacheControl=WHEEL_CACHE,
    )
    # Its PEP 658 METADATA pins torch 2.13, as every cell wheel's does: the channel-wide page may list it.
    metadata = f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\nRequires-Dist: torch<2.14,>=2.13\n"
    aws.client("s3").put_object(
        Bucket=stack.outputs["WheelBucketName"],
        Key=f"wheels/{channel}/{project}/{name}.metadata",
        Body=metadata.encode(),
        Metadata={"sha256": hashlib.sha256(metadata.encode()).hexdigest()},
    )
    return name


def publish(aws: EmbeddedAws, stack: DeployedStack, channel: str, cloudfront: Any = None) -> dict[str, Any]:
    lam = aws.client("lambda")
    env = lam.get_function_configuration(FunctionName=stack.function_name("PublishIndexFunction"))
    clients = {"cloudfront": cloudfront or aws.client("cloudfront"), "kms": aws.client("kms")}
    public = Edge.from_environ(env["Environment"]["Variables"])
    return publish_index(aws.client("s3"), stack.outputs["WheelBucketName"], channel, public=public, clients=clients)


def test_what_is_missing_or_private_is_a_small_404_and_the_roots_list_what_is_there(
    aws: EmbeddedAws, site: tuple[DeployedStack, LocalEdge]
) -> None:
    stack, edge = site
    put_wheel(aws, stack, "ci", "wf-probe", "1.0")
    put_wheel(aws, stack, "private", "wf-probe", "1.0")
    publish(aws, stack, "private")
    assert http_get(f"{edge.url}/simple/ci/six/")[0] == 403  # before any public publish: no 404 page yet
    publish(aws, stack, "ci")
    page = site_pages(["ci", "nightly"])[NOT_FOUND].encode()
    missing = [
        ("/simple/ci/six/", None),  # uv, with the channel beside PyPI, asks each index for each project
        ("/simple/ci/six/", JSON),
        ("/simple/ci/six/index.html", None),
        ("/wheels/ci/wf-probe/wf_probe-9.9-py3-none-any.whl", None),
        ("/simple/private/", None),  # a private channel is not there at all, from outside
        ("/simple/private/wf-probe/", JSON),
        ("/simple/nightly/", None),  # public, never published
        ("/runs/", None),
    ]
    for path, accept in missing:
        status, headers, body = http_get(edge.url + path, accept)
        assert (status, body) == (404, page), (path, accept, status, body[:200])
        assert headers["Content-Type"].startswith("text/html") and "Vary" not in headers, path
    cached = http_get(f"{edge.url}/simple/ci/six/")[1]
    assert cached["X-Cache"] == "Hit from cloudfront"  # kept for the error TTL (60 s), not asked again
    status, _, body = http_get(f"{edge.url}/simple/ci/")
    assert status == 200 and b'href="wf-probe/"' in body
    status, _, body = http_get(f"{edge.url}/simple/")  # PublicIndexUrl, in a browser
    assert status == 200 and b'href="ci/"' in body and b'href="nightly/"' in body and b"private" not in body
    # The project appears at once after the publish that adds it: the cached miss is invalidated too.
    put_wheel(aws, stack, "ci", "six", "1.16.0")
    publish(aws, stack, "ci")
    assert http_get(f"{edge.url}/simple/ci/six/")[0] == 200


def test_pages_picked_by_accept_say_so(aws: EmbeddedAws, site: tuple[DeployedStack, LocalEdge]) -> None:
    stack, edge = site
    wheel = put_wheel(aws, stack, "ci", "wf-probe", "1.0")
    publish(aws, stack, "ci")
    for path in ("/simple/ci/", "/simple/ci/wf-probe/", f"/simple/ci/{VARIANT}/wf-probe/"):
        for accept in (None, JSON):
            for _ in range(2):  # from the origin, then from the cache
                status, headers, _ = http_get(edge.url + path, accept)
                assert status == 200 and headers.get("Vary") == "Accept", (path, accept, headers)
    for path in (f"/simple/ci/{VARIANT}.html", f"/wheels/ci/wf-probe/{wheel.replace('+', '%2B')}"):
        status, headers, _ = http_get(edge.url + path)
        assert status == 200 and "Vary" not in headers, path


def spellings(project: str) -> list[tuple[str, str | None]]:
    """Every way a viewer may ask for the pages that a publish changes: the channel's and the variant's
    roots and the project's pages, by folder (HTML or JSON by Accept) or by file, with '+', %2B or %2b."""
    out: list[tuple[str, str | None]] = []
    for folder in ("/simple/ci/", f"/simple/ci/{project}/"):
        out += [(folder, None), (folder, JSON), (f"{folder}index.html", None), (f"{folder}index.v1.json", None)]
    for plus in ("+", "%2B", "%2b"):
        variant = VARIANT.replace("+", plus)
        out.append((f"/simple/ci/{variant}.html", None))  # the find-links page
        for folder in (f"/simple/ci/{variant}/", f"/simple/ci/{variant}/{project}/"):
            out += [(folder, None), (folder, JSON), (f"{folder}index.html", None)]
    for folder in (f"/simple/ci/{SHORT}/", f"/simple/ci/{SHORT}/{project}/"):  # the variant index users type
        out += [(folder, None), (folder, JSON), (f"{folder}index.html", None)]
    return out


def test_every_viewer_spelling_of_a_changed_page_is_fresh_after_a_publish(
    aws: EmbeddedAws, site: tuple[DeployedStack, LocalEdge]
) -> None:
    stack, edge = site
    put_wheel(aws, stack, "ci", "wf-probe", "1.0")
    publish(aws, stack, "ci")
    asked = spellings("wf-probe")
    # Two publishes, each changing a few pages: a new version (the project's pages and the find-links
    # page), then a new project (the channel's and the variant's roots).
    rounds = [("wf-probe", "1.1", b"wf_probe-1.1", True), ("wf-other", "1.0", b"wf-other", False)]
    for project, version, news, of_the_project in rounds:
        changed = [(p, a) for p, a in asked if ("/wf-probe/" in p or p.endswith("cpu.html")) == of_the_project]
        for path, accept in asked:
            http_get(edge.url + path, accept)
            status, headers, body = http_get(edge.url + path, accept)
            assert (status, headers["X-Cache"]) == (200, "Hit from cloudfront") and news not in body, path
        put_wheel(aws, stack, "ci", project, version)
        assert publish(aws, stack, "ci")["edge"]["invalidated"] == ["/simple/ci/*"]
        for path, accept in changed:
            status, _, body = http_get(edge.url + path, accept)
            assert status == 200 and news in body, (path, accept, body[:300])


def test_a_failed_invalidation_leaves_the_publish_undone_and_its_retry_invalidates(
    aws: EmbeddedAws, site: tuple[DeployedStack, LocalEdge]
) -> None:
    stack, edge = site
    s3, bucket = aws.client("s3"), stack.outputs["WheelBucketName"]

    class Throttled:
        def create_invalidation(self, **_: Any) -> dict[str, Any]:
            error = {"Error": {"Code": "TooManyInvalidationsInProgress", "Message": "slow down"}}
            raise ClientError(error, "CreateInvalidation")

    put_wheel(aws, stack, "ci", "wf-probe", "1.0")
    with pytest.raises(EdgeInvalidationFailed, match=rf"/simple/ci/\*.*{edge.distribution.id}.*slow down"):
        publish(aws, stack, "ci", cloudfront=Throttled())
    with pytest.raises(ClientError, match="NoSuchKey"):  # not recorded as done
        s3.get_object(Bucket=bucket, Key=f"simple/ci/{STATE}")
    retried = publish(aws, stack, "ci")["edge"]  # what the state machine's retry runs
    assert retried["invalidated"] == ["/simple/ci/*"] and retried["invalidation"]
    assert json.loads(s3.get_object(Bucket=bucket, Key=f"simple/ci/{STATE}")["Body"].read())["wheels"]
