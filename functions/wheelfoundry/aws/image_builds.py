"""Runtime image jobs after PublishIndex: one CodeBuild build per image, waited on with a task token.

The BuildImages Map's ``BuildImage`` state (``lambda:invoke.waitForTaskToken``) calls ``start_image``:
it stores the token at ``runs/<run>/jobs/<image id>/token`` (the key form the CodeBuild executor
uses, docs/contracts.md section 7) and starts the build on the stack's runtime image project
(privileged: Docker) with ``codebuild/image.yml`` from the run's pinned bundle. ``wfbuild.images.image_job``
reads the token from S3 and calls back with its result (or fails the task). A build that dies before
calling back is failed by the CodeBuild state-change rule and stopped by the reaper when its execution
ends, as a job's build (wheelfoundry.aws.codebuild: the same WF_TOKEN_KEY, WF_EXECUTION, WF_JOB_ID);
the state's timeout (the project's 60 minutes plus a margin) is the last layer.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from wheelfoundry.aws.codebuild import BuildStartFailed

BUILDSPEC_IN_BUNDLE = "codebuild/image.yml"
IMAGE_TIMEOUT_SECONDS = 60 * 60 + 300  # RuntimeImageProject's TimeoutInMinutes plus a margin


def image_key(run_id: str, image_id: str) -> str:
    return f"runs/{run_id}/images/{image_id}/image.json"


def token_key(run_id: str, image_id: str) -> str:
    return f"runs/{run_id}/jobs/{image_id}/token"


def _buildspec(s3: Any, bucket: str, bundle_key: str) -> str:
    try:
        body = s3.get_object(Bucket=bucket, Key=bundle_key)["Body"].read()
    except ClientError as exc:
        raise BuildStartFailed(f"s3://{bucket}/{bundle_key} (the run's build bundle): {exc}") from exc
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        return archive.read(BUILDSPEC_IN_BUNDLE).decode("utf-8")


def start_image(event: Mapping[str, Any], s3: Any, codebuild: Any, project: str) -> dict[str, Any]:
    run, image, execution = event["run"], event["image"], event.get("execution", "")
    bucket, token = run["bucket"], event["token"]
    key = token_key(run["id"], image["id"])
    s3.put_object(Bucket=bucket, Key=key, Body=token.encode(), ServerSideEncryption="AES256")
    variables = {
        "WF_BUCKET": bucket,
        "WF_IMAGE_KEY": image["key"],
        "WF_BUNDLE_KEY": run["bundle_key"],
        "WF_TOKEN_KEY": key,
        "WF_EXECUTION": execution,
        "WF_JOB_ID": image["id"],
    }
    overrides = [{"name": k, "value": v, "type": "PLAINTEXT"} for k, v in variables.items()]
    idempotency = hashlib.sha256(f"{execution}\0{image['id']}\0{token}".encode()).hexdigest()
    try:
        build = codebuild.start_build(
            projectName=project,
            buildspecOverride=_buildspec(s3, bucket, run["bundle_key"]),
            environmentVariablesOverride=overrides,
            computeTypeOverride=image["compute_type"],
            idempotencyToken=idempotency,
        )["build"]
    except ClientError as exc:
        raise BuildStartFailed(f"StartBuild for image job {image['id']} was refused: {exc}") from exc
    return {"id": image["id"], "build_id": build["id"], "project": project}
