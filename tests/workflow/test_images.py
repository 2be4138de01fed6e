"""Issue 11, end to end in the embedded AWS: a run with an ``image`` section builds the tiny extension's
wheel, publishes the index, then BuildImages runs the image job on the stack's runtime image project
through the local CodeBuild in host mode: the wheel is locked with the index's sha256, installed by
install_wheels.sh into a fresh venv with pip --require-hashes, the image tests run there, and the push
is emulated (ECR PutImage); the image's tag and provenance labels are checked in the registry."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.workflow.conftest import extension_request, run, s3_json, source, upload
from wheelfoundry_local import DeployedStack, EmbeddedAws


@pytest.mark.heavy  # a whole run with a real build and an image: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
def test_a_run_with_an_image_section_pushes_a_tested_runtime_image(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path
) -> None:
    image = {"tz": "Europe/Berlin", "uid": 1234, "gid": 2345, "tag": "{run}-torch{torch}-py{python}"}
    # per-cell: the cell wheel has no Requires-Dist on torch, so the image's lock is complete without one
    request = extension_request(upload(aws, stack, source(tmp_path)), layout="per-cell", image=image)
    result = run(aws, stack, request)
    assert result.succeeded, (result.error, result.cause)
    run_id = result.output["run_id"]
    report = s3_json(aws, stack, f"runs/{run_id}/report.json")
    (pushed,) = report["images"]
    tag = f"{run_id}-torch2.13.0-py3.11"
    assert pushed["status"] == "pushed" and pushed["tag"] == tag and pushed["uri"].endswith(f":{tag}")
    # The image job ran on the runtime project, with the token's key (never the token) in its variables.
    assert aws.codebuild is not None
    (build,) = [b for b in aws.codebuild.builds() if b.project == stack.physical_id("RuntimeImageProject")]
    deadline = time.monotonic() + 60  # the image job calls back from its build phase; the build ends after it
    while build.status == "IN_PROGRESS" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert build.status == "SUCCEEDED"
    (start,) = aws.invocations.of("ImagesFunction")
    assert start.event["token"] not in json.dumps(build.variables)
    assert {v["name"] for v in build.variables} >= {"WF_TOKEN_KEY", "WF_IMAGE_KEY", "WF_BUNDLE_KEY"}
    # The lock carried the index's sha256, and the image tests ran for real in the venv.
    bucket = stack.outputs["WheelBucketName"]
    page = aws.client("s3").get_object(Bucket=bucket, Key="simple/ci/wf-tiny-ext/index.html")["Body"].read().decode()
    (filename,), (sha,) = re.findall(r">([^<]+\.whl)</a>", page), re.findall(r"#sha256=([0-9a-f]{64})", page)
    outcome = s3_json(aws, stack, f"runs/{run_id}/images/{pushed['id']}/result.json")
    assert outcome["wheels"] == [{"filename": filename, "sha256": sha}]
    checks = outcome["tests"]["checks"]
    assert checks["import wf_tiny_ext"]["ok"] and "/context/venv/" in checks["import wf_tiny_ext"]["detail"]
    assert checks["time zone"] == {"ok": True, "detail": "Europe/Berlin"}
    # The emulated push: the tag in the runtime repository, the provenance labels in its manifest.
    repository = stack.outputs["RuntimeRepositoryUri"].split("/", 1)[1]
    (found,) = aws.client("ecr").batch_get_image(repositoryName=repository, imageIds=[{"imageTag": tag}])["images"]
    labels = json.loads(found["imageManifest"])["annotations"]
    assert labels["dev.wheelfoundry.run-id"] == run_id
    # every wheel the image installed, the run's first, each by its sha256 (the cell wheel's torch pin brings
    # torch's closure into the lock: wfbuild.images.runtime_image)
    locked = labels["dev.wheelfoundry.wheel-sha256"].split(",")
    assert locked[0] == f"{filename}={sha}", locked
    assert all(re.fullmatch(r"[^=,]+\.whl=[0-9a-f]{64}", entry) for entry in locked), locked
    assert found["imageId"]["imageDigest"] == pushed["digest"]
