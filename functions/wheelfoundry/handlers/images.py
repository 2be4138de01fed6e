"""Images: start one runtime image build; the BuildImage state waits for the image job's callback."""

from __future__ import annotations

from typing import Any

from wheelfoundry.aws.image_builds import start_image
from wheelfoundry.handlers.runtime import Runtime, entrypoint, logger


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    result = start_image(event, rt.client("s3"), rt.client("codebuild"), rt.var("WF_IMAGE_PROJECT"))
    logger.info("image build started", extra=result)  # never the event: it holds the token
    return result
