"""PublishIndex: rewrite the channel's simple index from the wheels in the bucket; refresh a public channel's edge."""

from __future__ import annotations

from typing import Any

from wheelfoundry.handlers.runtime import Runtime, entrypoint
from wheelfoundry.publishing.edge import Edge
from wheelfoundry.publishing.index import publish_index


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    run = event["run"]
    public = Edge.from_environ(rt.environ)
    clients = {"cloudfront": rt.client("cloudfront"), "kms": rt.client("kms")} if public else None
    return publish_index(rt.client("s3"), run["bucket"], run["channel"], public=public, clients=clients)
