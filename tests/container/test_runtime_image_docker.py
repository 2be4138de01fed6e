"""Issue 23, the runtime-image path for real: after the run publishes the tiny extension's wheel, the
image job (the local CodeBuild, WF_CONTAINER=docker) builds buildspecs/images/runtime/slim.Dockerfile
with `docker build` FROM the test base, runs the image tests in a container of the built image, and
pushes to the embedded ECR. moto's ECR has no layer upload, so the push is ECR PutImage of the built
image's own manifest facts (config digest, layer digests, labels); tests/workflow/test_images.py is
the host-mode twin.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from tests.workflow.conftest import extension_request, run, s3_json, source, upload
from wheelfoundry_local import DeployedStack, EmbeddedAws

pytestmark = pytest.mark.heavy  # real builds in Docker: `make test-heavy` (.ci/heavy, after `make docker`)


def test_a_runtime_image_is_built_with_docker_tested_in_it_and_its_manifest_pushed(
    aws: EmbeddedAws, stack: DeployedStack, tmp_path: Path, runtime_base: str, docker_testbed: ModuleType
) -> None:
    image = {"tz": "Europe/Berlin", "uid": 1234, "gid": 2345, "tag": "{run}-docker"}
    request = extension_request(upload(aws, stack, source(tmp_path)), layout="per-cell", image=image)
    result = run(aws, stack, request)
    run_id = result.output["run_id"] if result.succeeded else str(result.arn).rsplit(":", 1)[1]
    (pushed,) = s3_json(aws, stack, f"runs/{run_id}/report.json")["images"]
    outcome = s3_json(aws, stack, f"runs/{run_id}/images/{pushed['id']}/result.json")
    assert outcome["status"] == "pushed", outcome.get("error")
    assert result.succeeded, (result.error, result.cause)
    assert outcome["tests"] == "ran in the image before the push"
    assert outcome["pushed"].startswith("manifest of the built image")
    # The image exists in the engine, built FROM the test base, with the run's provenance labels.
    ref = outcome["uri"]
    inspect = subprocess.run(
        ["docker", "image", "inspect", ref], env=docker_testbed.docker_env(), capture_output=True, text=True, check=True
    )
    (built,) = json.loads(inspect.stdout)
    labels = built["Config"]["Labels"]
    assert labels["org.opencontainers.image.base.name"] == runtime_base
    assert labels["dev.wheelfoundry.run-id"] == run_id
    (wheel,) = outcome["wheels"]
    # every wheel the image installed, the run's first, each by its sha256: the cell wheel pins its torch minor,
    # so torch 2.13 and its closure are locked into the image too (wfbuild.images.runtime_image)
    locked = labels["dev.wheelfoundry.wheel-sha256"].split(",")
    assert locked[0] == f"{wheel['filename']}={wheel['sha256']}", locked
    assert all(re.fullmatch(r"[^=,]+\.whl=[0-9a-f]{64}", entry) for entry in locked), locked
    assert any(entry.startswith("torch-2.13.") for entry in locked), locked
    assert built["Config"]["User"] == "1234:2345" and "TZ=Europe/Berlin" in built["Config"]["Env"]
    # The image tests ran in a container of it: the wheel imports as the request's user, in its zone.
    probe = ["docker", "run", "--rm", "--network", "none", ref, "python", "-c",
             "import os, time, wf_tiny_ext; print(os.getuid(), os.getgid(), time.tzname[0], wf_tiny_ext.__file__)"]  # fmt: skip
    shown = subprocess.run(probe, env=docker_testbed.docker_env(), capture_output=True, text=True, check=True).stdout
    uid, gid, zone, module = shown.split()
    assert (uid, gid, zone) == ("1234", "2345", "CET") and module.startswith("/opt/venv/")
    # The registry holds the built image's manifest: its config digest, its layers, its labels.
    repository = ref.split("/", 1)[1].split(":", 1)[0]
    (found,) = aws.client("ecr").batch_get_image(
        repositoryName=repository, imageIds=[{"imageTag": ref.rsplit(":", 1)[1]}]
    )["images"]
    manifest = json.loads(found["imageManifest"])
    assert manifest["config"]["digest"] == built["Id"]
    assert [layer["digest"] for layer in manifest["layers"]] == built["RootFS"]["Layers"]
    assert manifest["annotations"]["dev.wheelfoundry.run-id"] == run_id
    assert found["imageId"]["imageDigest"] == outcome["digest"]
