"""PublishIndex: rewrite the channel's simple index from the wheels in the bucket."""

from __future__ import annotations

from typing import Any

from wheelfoundry.handlers.runtime import Runtime, entrypoint
from wheelfoundry.index import publish_index


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    run = event["run"]
    return publish_index(rt.client("s3"), run["bucket"], run["channel"])
