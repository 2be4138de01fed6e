"""Upload: send a run's signed wheels to its `options.publish` target with twine (PyPI, CodeArtifact, a URL)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from wheelfoundry.aws.uploads import upload_run
from wheelfoundry.handlers.runtime import Runtime, entrypoint, logger, metrics


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    clients = {name: rt.client(name) for name in ("s3", "kms", "secretsmanager", "codeartifact")}
    work = Path(tempfile.mkdtemp(prefix="wf-upload-"))  # /tmp: the function's ephemeral storage
    secret = rt.var("WF_PUBLISH_SECRET_ARN", "")
    result = upload_run(event, clients, secret, rt.var("WF_PROVENANCE_KEY_ARN"), work)
    metrics.add_metric(name="WheelsUploaded", unit="Count", value=len(result["uploaded"]))
    logger.info("uploaded", extra={"run": event["run"]["id"], **result})
    return result
