"""One runtime image job: ``python -m wfbuild.images.image_job`` (buildspecs/codebuild/image.yml runs it).

Environment: ``WF_BUCKET``, ``WF_IMAGE_KEY`` (``runs/<run>/images/<id>/image.json``, written by
Validate), ``WF_WORK_DIR``, ``WF_CONTAINER`` (``docker``: build, test and push with Docker, as on a
privileged CodeBuild project; ``none``: host mode, the "image" is a venv made by the same install
script, and the push is emulated with ECR PutImage of a manifest whose annotations are the image's
labels), ``AWS_REGION``, ``WF_TOKEN_KEY`` (the BuildImage state's task token in S3). The embedded
AWS's Docker test bed adds ``WF_RUNTIME_BASE_IMAGE`` (a local base instead of the recipe's pinned one)
and ``WF_ECR_PUSH=manifest`` (moto's ECR takes no layers: PutImage of the built image's manifest). Writes
``runs/<run>/images/<id>/result.json``, calls the state machine back, and exits 0 (pushed) or 1.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import boto3
from packaging.utils import canonicalize_name

from wfbuild.execute import BuildLog
from wfbuild.images import container, runtime_image, upstream_lock
from wfbuild.wheels import wheelfile

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"


def lock_for(image: Mapping[str, Any], run: Mapping[str, Any], s3: Any) -> list[runtime_image.Locked]:
    """Each wheel from its channel's index page (the sha256 the index publishes)."""
    locked = []
    for wheel in image["wheels"]:
        channel = wheel.get("channel") or run["channel"]
        project = canonicalize_name(wheel["package"])
        key = f"simple/{channel}/{project}/index.html"
        try:
            page = s3.get_object(Bucket=run["bucket"], Key=key)["Body"].read().decode()
        except s3.exceptions.NoSuchKey:
            raise runtime_image.ImageJobFailed(f"{wheel['package']} is not in channel {channel!r} ({key})") from None
        files = runtime_image.parse_index(page)
        locked.append(
            runtime_image.select(files, project, channel, wheel.get("version"), image["python"], image["platform"])
        )
    return locked


def lock_upstream(
    image: Mapping[str, Any], locked: list[runtime_image.Locked], context: Path, work: Path, environ: Mapping[str, str]
) -> list[runtime_image.Locked]:
    """The index wheels' dependencies and ``image.pip`` from the upstream index (wfbuild.images.upstream_lock);
    nothing to resolve (wheels without Requires-Dist, no pins) asks no index at all."""
    wheels = context / "wheels"
    needs = any(wheelfile.info(wheels / item.filename).requires_dist for item in locked) or image.get("pip")
    if not needs:
        return []
    index = environ.get("WF_UPSTREAM_INDEX_URL") or image.get("upstream_index")
    links = environ.get("WF_UPSTREAM_FIND_LINKS")  # tests: a folder stands in for the upstream index
    upstream = upstream_lock.resolve(image, wheels, locked, work, index, links)
    upstream_lock.download(image, upstream, wheels, work, index, links)
    return upstream


def base_digest(image: Mapping[str, Any], bundle: Path) -> str:
    """The base's digest from base-images.lock; an unpinned base fails the job (bump_base_images.py)."""
    spec = importlib.util.spec_from_file_location("bump_base_images", bundle / "images" / "bump_base_images.py")
    assert spec and spec.loader
    bump = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bump)
    pinned: str = bump.resolve(image["base"])
    return pinned.split("@", 1)[1]


def emulated_push(ecr: Any, repository: str, tag: str, labels: Mapping[str, str]) -> str:
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + "0" * 64,
                   "size": 0},
        "layers": [],
        "annotations": dict(labels),
    }  # fmt: skip
    return put_manifest(ecr, repository, tag, manifest)


def put_manifest(ecr: Any, repository: str, tag: str, manifest: Mapping[str, Any]) -> str:
    """ECR PutImage of ``manifest`` under ``tag``; the digest the registry gives it."""
    ecr.put_image(
        repositoryName=repository, imageManifest=json.dumps(manifest), imageManifestMediaType=MANIFEST_TYPE,
        imageTag=tag,
    )  # fmt: skip
    found = ecr.batch_get_image(repositoryName=repository, imageIds=[{"imageTag": tag}])["images"][0]
    return str(found["imageId"]["imageDigest"])


def manifest_push(ecr: Any, repository: str, tag: str, ref: str, environ: Mapping[str, str]) -> str:
    """Push what a registry without blob upload can take (moto's ECR: no layer-upload API): ECR PutImage
    of the built image's own manifest facts (its config digest, its layers' digests, its labels);
    the blobs stay on this host, and the manifest says so."""
    proc = subprocess.run(["docker", "image", "inspect", ref], env=dict(environ), capture_output=True, text=True)
    if proc.returncode != 0:
        raise runtime_image.ImageJobFailed(f"docker image inspect {ref} failed: {proc.stderr.strip()[-500:]}")
    (found,) = json.loads(proc.stdout)
    layer = "application/vnd.oci.image.layer.v1.tar"  # diff ids: the uncompressed layers' digests
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": found["Id"], "size": 0},
        "layers": [{"mediaType": layer, "digest": d, "size": 0} for d in found["RootFS"]["Layers"]],
        "annotations": {**(found["Config"].get("Labels") or {}), "dev.wheelfoundry.push": "manifest only (no blobs)"},
    }
    return put_manifest(ecr, repository, tag, manifest)


def provisioned_base(environ: Mapping[str, str], log: BuildLog) -> tuple[str, str] | None:
    """WF_RUNTIME_BASE_IMAGE: a base already on this host (the Docker test bed's), used instead of the
    recipe's pinned one: (the image, its local id), said in the log."""
    base = environ.get("WF_RUNTIME_BASE_IMAGE", "")
    if not base:
        return None
    found = container.image_id(base, environ)
    if found is None:
        raise runtime_image.ImageJobFailed(f"WF_RUNTIME_BASE_IMAGE={base} is not an image on this host")
    log.note(f"runtime base {base} (WF_RUNTIME_BASE_IMAGE; not the recipe's pinned base)")
    return base, found


def run(environ: Mapping[str, str], clients: Mapping[str, Any] | None = None) -> dict[str, Any]:
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    clients = clients or {}
    s3 = clients.get("s3") or boto3.client("s3", region_name=region)
    ecr = clients.get("ecr") or boto3.client("ecr", region_name=region)
    bucket, key = environ["WF_BUCKET"], environ["WF_IMAGE_KEY"]
    contract = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    image, run_info = contract, contract["run"]
    work = Path(environ.get("WF_WORK_DIR") or "/tmp/wf-image").resolve() / image["id"]
    bundle = Path(environ.get("WF_BUNDLE_DIR") or Path(__file__).resolve().parents[2])
    result: dict[str, Any] = {"id": image["id"], "status": "failed", "tag": image["tag"]}
    try:
        locked = lock_for(image, run_info, s3)
        context = work / "context"
        runtime_image.prepare_context(
            context, locked, lambda k, dest: s3.download_file(run_info["bucket"], k, str(dest))
        )
        host = environ.get("WF_CONTAINER", "docker") != "docker"
        upstream = lock_upstream(image, locked, context, work, environ)
        locked_all = locked + upstream
        (context / "requirements.txt").write_text(runtime_image.lock_text(locked_all), encoding="utf-8")
        log = BuildLog(work / "image.log")
        provisioned = None if host else provisioned_base(environ, log)
        try:
            digest = provisioned[1] if provisioned else base_digest(image, bundle)
        except LookupError:  # bump_base_images.Unpinned
            if not host:
                raise
            digest = ""  # host mode pulls no base image; the label says none was pinned
        args = runtime_image.build_args(image, run_info["id"], locked_all, digest)
        if provisioned:
            args["BASE_IMAGE"] = provisioned[0]
        modules = runtime_image.modules_of(locked, context)
        repository = run_info["runtime_repository"]
        result |= {"wheels": [{"filename": i.filename, "sha256": i.sha256} for i in locked], "base_digest": digest}
        result["upstream"] = [{"filename": i.filename, "sha256": i.sha256} for i in upstream]
        if not host:
            ref = f"{repository}:{image['tag']}"
            blobs = environ.get("WF_ECR_PUSH", "docker") == "docker"  # manifest: the registry takes no blobs
            if blobs:
                container.ecr_login(repository.split("/", 1)[0], region, log, environ)
            gpu = environ.get("WF_GPU") == "1"
            commands = runtime_image.docker_commands(image, context, ref, args, modules, gpu)
            for argv in commands if blobs else commands[:-1]:
                proc = subprocess.run(argv, env=dict(environ), capture_output=True, text=True, check=False)
                log.note(f"{argv[:2]}: exit {proc.returncode}\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
                if proc.returncode != 0:
                    raise runtime_image.ImageJobFailed(f"{' '.join(argv[:2])} failed: {proc.stderr[-2000:]}")
            result |= {"uri": ref, "tests": "ran in the image before the push"}
            if not blobs:
                result["digest"] = manifest_push(ecr, repository.split("/", 1)[-1], image["tag"], ref, environ)
                result["pushed"] = "manifest of the built image (ECR PutImage; this registry takes no blobs)"
        else:
            result["tests"] = runtime_image.host_image(image, context, modules)
            name = repository.split("/", 1)[-1]
            result["digest"] = emulated_push(ecr, name, image["tag"], runtime_image.labels(args))
            result["uri"] = f"{repository}:{image['tag']}"
            result["pushed"] = "emulated (ECR PutImage; host mode)"
        result["status"] = "pushed"
    except Exception as exc:  # reported in result.json; the exit status says it too
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["trace"] = traceback.format_exc()[-4000:]
    s3.put_object(Bucket=bucket, Key=os.path.dirname(key) + "/result.json", Body=json.dumps(result, indent=2))
    call_back(environ, result, s3, clients.get("stepfunctions") or boto3.client("stepfunctions", region_name=region))
    return result


def call_back(environ: Mapping[str, str], result: Mapping[str, Any], s3: Any, sfn: Any) -> None:
    """The BuildImage state's token, read from S3 (never in the build's environment): success with the
    result (without the trace), or ImageFailed with the error."""
    token_key = environ.get("WF_TOKEN_KEY", "")
    if not token_key:
        return  # started by hand: result.json and the exit status tell
    token = s3.get_object(Bucket=environ["WF_BUCKET"], Key=token_key)["Body"].read().decode().strip()
    if result["status"] == "pushed":
        output = {k: v for k, v in result.items() if k not in ("trace", "tests")}
        sfn.send_task_success(taskToken=token, output=json.dumps(output))
    else:
        sfn.send_task_failure(taskToken=token, error="ImageFailed", cause=str(result.get("error", ""))[:32000])
    s3.delete_object(Bucket=environ["WF_BUCKET"], Key=token_key)  # the task has ended: the token is useless


def main() -> int:
    result = run(os.environ)
    print(json.dumps({k: v for k, v in result.items() if k != "trace"}, indent=2))
    if result["status"] != "pushed":
        print(result.get("trace", ""), file=sys.stderr)
    return 0 if result["status"] == "pushed" else 1


if __name__ == "__main__":
    sys.exit(main())
