"""Nothing in the catalog is refused: every (release, target, CUDA version) passes the deployed stack's
Validate with the image check AWS runs (every builder image held to the bundle's pinned bases,
downloads and CUDA toolkit locks), framework builds and extension cells alike.

The stack is the shipped template in the embedded AWS; Validate is invoked as the state machine
invokes it, with WF_CONTAINER=docker as on AWS (the emulator's own hosts build without Docker).
"""

from __future__ import annotations

import json
from typing import Any

from tests.workflow.test_workflow import with_image_check
from wheelfoundry.catalog.catalog import Catalog, load_catalog
from wheelfoundry_local import DeployedStack, EmbeddedAws

CATALOG = load_catalog()


def _slim(catalog: Catalog, cudas: tuple[str, ...]) -> list[str]:
    """The CUDA versions a slim wheel can be built for (the catalog refuses the others itself; one a release
    names with no toolkit row, CUDA 13.2, is the stack's watcher's to lock: tests/test_watch_toolkits.py)."""
    return [c for c in cudas if c in catalog.cuda and catalog.cuda[c].requirements]


def framework_requests(catalog: Catalog) -> list[tuple[str, dict[str, Any]]]:
    """One request per release and target: x86_64 CPU, each x86_64 CUDA, aarch64 CPU, each aarch64 CUDA."""
    found = []
    versions = [(r.latest_patch(), r.python, r.cuda, r.aarch64_cuda) for r in catalog.releases]
    versions += [(m.name, m.python, m.cuda, m.aarch64_cuda) for m in catalog.moving.values()]
    for version, pythons, cudas, aarch64_cudas in versions:
        targets: list[dict[str, Any]] = [{"platform": "x86_64"}, {"platform": "aarch64"}]
        targets += [{"platform": "x86_64", "accelerator": "cuda", "cuda": c} for c in _slim(catalog, cudas)]
        targets += [{"platform": "aarch64", "accelerator": "cuda", "cuda": c} for c in _slim(catalog, aarch64_cudas)]
        for target in targets:
            name = f"{version} {target['platform']} {target.get('cuda', 'cpu')}"
            found.append(
                (name, {"version": version, "python": [pythons[0]], "packages": ["torch"], "targets": [target]})
            )
    return found


def extension_requests(catalog: Catalog, bucket: str) -> list[tuple[str, dict[str, Any]]]:
    """Per CUDA version of the catalog, an extension request on the newest release offering it, on
    each platform it is built for."""
    found = []
    for cuda in sorted({c for r in catalog.releases for c in _slim(catalog, r.cuda)}):
        for platform in catalog.cuda[cuda].platforms:
            offered = [r for r in catalog.releases if cuda in (r.aarch64_cuda if platform == "aarch64" else r.cuda)]
            if not offered:
                continue
            release = offered[-1]
            request = {
                "framework": "extension",
                "name": "wf-example-ops",
                "source": {"s3": f"s3://{bucket}/sources/x.tar.gz"},
            }
            request |= {
                "torch": [release.torch],
                "cuda": ["cpu", cuda],
                "python": [release.python[0]],
                "platforms": [platform],
            }
            found.append((f"extension torch {release.torch} {platform} {cuda}", request))
    return found


def test_validate_with_the_image_check_refuses_nothing_in_the_catalog(aws: EmbeddedAws, stack: DeployedStack) -> None:
    with_image_check(aws, stack)
    lam, function = aws.client("lambda"), stack.function_name("ValidateFunction")
    s3, bucket = aws.client("s3"), stack.outputs["WheelBucketName"]
    requests = framework_requests(CATALOG) + extension_requests(CATALOG, stack.outputs["WheelBucketName"])
    refused, checked = [], set()
    for i, (name, request) in enumerate(requests):
        event = {
            "request": request,
            "name": f"walk-{i}",
            "execution": f"arn:aws:states:us-east-1:123456789012:execution:x:walk-{i}",
        }
        reply = lam.invoke(FunctionName=function, Payload=json.dumps(event))
        body = json.loads(reply["Payload"].read())
        if reply.get("FunctionError"):
            refused.append(f"{name}: {body.get('errorType')}: {body.get('errorMessage')}")
            continue
        for job in body["jobs"]:  # the job contract Validate wrote for the build host
            key = f"runs/walk-{i}/jobs/{job['id']}/job.json"
            contract = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
            checked.add((f"{name} {job['id']}", contract["image"]["recipe"]))
    assert refused == [], "\n".join(refused)
    recipes = {recipe for _, recipe in checked}
    assert {"x86_64-cpu", "x86_64-cuda", "aarch64-cpu", "aarch64-cuda"} <= recipes, recipes
    cuda_targets = {name for name, recipe in checked if recipe.endswith("-cuda")}
    assert len(cuda_targets) >= 40, len(cuda_targets)  # every release's CUDA variants, both platforms
    assert aws.instances(states=("pending", "running", "terminated")) == []  # Validate launches nothing
