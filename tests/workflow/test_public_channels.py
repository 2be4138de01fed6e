"""A public channel through the whole stack: a real per-cell build published by the real state machine,
then read as a stranger reads it, through the distribution the template declares (the local edge runs its
function, its cache rules and the bucket policy's grant): anonymous pip installs from the index URL and
from a find-links page, nothing private reachable, JSON or HTML by Accept, a new page after a publish."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import http_get
from tests.workflow.conftest import explained, extension_request, run, s3_keys, source, upload
from wheelfoundry.publishing.edge import NOT_FOUND, site_pages
from wheelfoundry_local import DeployedStack, EmbeddedAws
from wheelfoundry_local.consumer import anonymous_env
from wheelfoundry_local.edge import serving_edge

# A whole run with a real build and two fresh venvs (about 40 s on 2 cores): the gate runs it in make test-heavy,
# keeping make test, the quick loop, within 5 minutes. tests/local/test_edge.py holds the edge's rules in make test.
pytestmark = pytest.mark.heavy

PIP_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01"


@pytest.fixture
def parameters() -> dict[str, Any]:
    return {"BuildHeartbeatSeconds": "60", "PublicChannels": "ci"}


def fresh_venv(where: Path) -> Path:
    """A new venv that sees this interpreter's torch (a .pth file), as a user's venv with torch has it."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    purelib = Path(subprocess.check_output([where / "bin/python", "-c", code], text=True).strip())
    (purelib / "zz-users-torch.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return where / "bin" / "python"


def pip_install(python: Path, *args: str) -> None:
    env = anonymous_env()
    assert not [k for k in env if k.startswith("AWS_")]
    argv = [str(python), "-m", "pip", "install", "--isolated", "--disable-pip-version-check", "-q", "--no-deps", *args]
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def smoke(python: Path) -> str:
    code = "import torch, wf_tiny_ext as m; print(m.__file__)"
    return subprocess.check_output([str(python), "-c", code], env=anonymous_env(), text=True).strip()


def test_a_public_channel_serves_anyone_and_nothing_else(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    result = run(aws, stack, extension_request(upload(aws, stack, source(tmp_path)), layout="per-cell"))
    assert result.succeeded, explained(aws, stack, result)
    public = result.output["public"]
    assert public["index_url"] == stack.outputs["PublicIndexUrl"] + "ci/"
    (find_links,) = public["find_links"]
    assert find_links == public["index_url"] + "torch-2.13.0%2Bcpu.html"
    assert public["variant_indexes"] == {"torch2.13-cpu": public["index_url"] + "torch2.13-cpu/"}  # listed first
    s3, bucket, run_id = aws.client("s3"), stack.outputs["WheelBucketName"], result.output["run_id"]
    (wheel_key,) = [k for k in s3_keys(aws, stack, "wheels/ci/wf-tiny-ext/") if k.endswith(".whl")]
    # The same bytes in a channel that is not public, and the other things the bucket holds.
    private_key = wheel_key.replace("wheels/ci/", "wheels/private/")
    s3.copy_object(Bucket=bucket, Key=private_key, CopySource={"Bucket": bucket, "Key": wheel_key})
    s3.put_object(Bucket=bucket, Key="simple/private/index.html", Body=b"<html></html>")
    s3.put_object(Bucket=bucket, Key="sccache/ext-x/ab/cd", Body=b"object")
    private = [
        "/simple/private/",
        "/" + private_key,
        f"/runs/{run_id}/report.json",
        "/bundles/current.json",
        "/sccache/ext-x/ab/cd",
        "/simple/ci/.index-state.json",
        "/" + next(k for k in s3_keys(aws, stack, "sources/")),
    ]
    with serving_edge(aws, stack) as edge:
        index = edge.local(public["index_url"])
        first = fresh_venv(tmp_path / "by-index")
        pip_install(first, "--index-url", index, "wf-tiny-ext")
        assert str(tmp_path / "by-index") in smoke(first)  # the installed copy
        second = fresh_venv(tmp_path / "by-find-links")
        pip_install(second, "--no-index", "-f", edge.local(find_links), "wf-tiny-ext")
        assert str(tmp_path / "by-find-links") in smoke(second)
        # As a user types it, with a literal '+': the function sends it on as %2B (S3 reads '+' as a space).
        status, _, body = http_get(edge.local(find_links).replace("%2B", "+"))
        assert status == 200 and b"wf_tiny_ext-" in body
        status, headers, _ = http_get(f"{edge.url}/{wheel_key.replace('+', '%2B')}")  # as Collect published it
        assert status == 200 and headers["Cache-Control"] == "public, max-age=31536000, immutable"

        for path in private:  # refused by the bucket policy, so from outside: not there (issue 65)
            status, _, body = http_get(edge.url + path)
            assert status == 404 and body == site_pages(["ci"])[NOT_FOUND].encode(), path
        assert s3.get_object(Bucket=bucket, Key=f"runs/{run_id}/report.json")  # it is there, only not public

        page = f"{index}wf-tiny-ext/"
        status, headers, body = http_get(page, PIP_ACCEPT)
        assert status == 200 and headers["Content-Type"] == "application/vnd.pypi.simple.v1+json"
        listing = json.loads(body)
        assert listing["meta"]["api-version"] == "1.1" and listing["name"] == "wf-tiny-ext"
        (entry,) = listing["files"]
        assert entry["filename"] == wheel_key.rsplit("/", 1)[1] and entry["size"] > 0 and entry["core-metadata"]
        status, headers, html = http_get(page)
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert entry["hashes"]["sha256"] in html.decode()
        status, headers, _ = http_get(page, "text/html, application/vnd.pypi.simple.v1+json; q=0.5")
        assert headers["Content-Type"].startswith("text/html")  # HTML preferred by its q

        # Cached at the edge; a publish that changes the page invalidates it, and the next user sees it.
        assert http_get(page)[1]["X-Cache"] == "Hit from cloudfront"
        newer = wheel_key.replace("wf_tiny_ext-0.1.0+", "wf_tiny_ext-0.1.1+")
        assert newer != wheel_key
        head = s3.head_object(Bucket=bucket, Key=wheel_key)
        s3.copy_object(
            Bucket=bucket,
            Key=newer,
            CopySource={"Bucket": bucket, "Key": wheel_key},
            Metadata=head["Metadata"],
            MetadataDirective="REPLACE",
        )
        # and its PEP 658 file, as Collect publishes one beside each wheel: the channel-wide page lists a cell
        # wheel only where its metadata pins its torch (wheelfoundry.publishing.index_variants)
        s3.copy_object(
            Bucket=bucket, Key=f"{newer}.metadata", CopySource={"Bucket": bucket, "Key": f"{wheel_key}.metadata"}
        )
        answer = aws.client("lambda").invoke(
            FunctionName=stack.function_name("PublishIndexFunction"),
            Payload=json.dumps({"run": {"bucket": bucket, "channel": "ci"}}).encode(),
        )
        published = json.loads(answer["Payload"].read())
        assert published["edge"]["invalidated"] == ["/simple/ci/*"]  # every spelling of every page, one path
        status, headers, html = http_get(page)
        assert status == 200 and newer.rsplit("/", 1)[1].replace("+", "%2B") in html.decode()
        assert headers["X-Cache"] == "Miss from cloudfront"
        key = published["edge"]["key_fingerprint"]
        status, _, pem = http_get(f"{edge.url}/keys/{key}.pem")
        assert status == 200 and pem.startswith(b"-----BEGIN PUBLIC KEY-----")
