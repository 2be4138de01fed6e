"""Issue 11: one runtime image job (wfbuild.images.image_job) in host mode against fakes of S3, ECR and Step
Functions: the lock from the index, the upstream dependencies, the emulated push, the callback, and a
wheel whose bytes differ from the index's sha256."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

from tests.buildspecs.test_runtime_image import IMAGE, PY, make_wheel, sha
from wheelfoundry.publishing.index import IndexFile, render_project


class _S3:
    """Enough of S3 for one image job: objects in a dict."""

    class exceptions:  # boto3 spelling
        class NoSuchKey(Exception):
            pass

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        if Key not in self.objects:
            raise self.exceptions.NoSuchKey(Key)
        return {"Body": io.BytesIO(self.objects[Key])}

    def put_object(self, Bucket: str, Key: str, Body: Any) -> None:
        self.objects[Key] = Body.encode() if isinstance(Body, str) else Body

    def download_file(self, bucket: str, key: str, dest: str) -> None:
        Path(dest).write_bytes(self.objects[key])

    def delete_object(self, Bucket: str, Key: str) -> None:
        self.objects.pop(Key, None)


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        def record(**kwargs: Any) -> Any:
            self.calls.append((name, kwargs))
            digest = "sha256:" + hashlib.sha256(kwargs.get("imageManifest", "").encode()).hexdigest()
            return {"images": [{"imageId": {"imageDigest": digest}}]}

        return record


def _image_job_objects(wheel: Path, index_sha: str, pip: tuple[str, ...] = ()) -> dict[str, bytes]:
    image = {**IMAGE, "id": "image-a", "platform": "x86_64", "python": PY, "cuda": None, "pip": list(pip), "tag": "r1-a",
             "wheels": [{"package": "wf-img-probe", "version": None, "channel": None}]}  # fmt: skip
    run = {"id": "r1", "bucket": "b", "channel": "demo", "runtime_repository": "123.dkr.ecr/acct-rt"}
    page = render_project("demo", "wf-img-probe", [IndexFile(wheel.name, index_sha, None, None)])
    return {
        "runs/r1/images/image-a/image.json": json.dumps({**image, "run": run}).encode(),
        "simple/demo/wf-img-probe/index.html": page.encode(),
        f"wheels/demo/wf-img-probe/{wheel.name}": wheel.read_bytes(),
        "runs/r1/jobs/image-a/token": b"TOKEN",
    }


def test_image_job_in_host_mode_pushes_and_calls_back_or_fails_the_task(tmp_path: Path) -> None:
    from wfbuild.images import image_job

    wheel = make_wheel(tmp_path)
    env = {"WF_BUCKET": "b", "WF_IMAGE_KEY": "runs/r1/images/image-a/image.json", "WF_CONTAINER": "none",
           "WF_WORK_DIR": str(tmp_path / "work"), "WF_TOKEN_KEY": "runs/r1/jobs/image-a/token"}  # fmt: skip
    s3, ecr, sfn = _S3(_image_job_objects(wheel, sha(wheel))), _Recorder(), _Recorder()
    result = image_job.run(env, {"s3": s3, "ecr": ecr, "stepfunctions": sfn})
    assert result["status"] == "pushed", result.get("trace")
    (put, _) = ecr.calls
    assert put[0] == "put_image" and put[1]["imageTag"] == "r1-a" and put[1]["repositoryName"] == "acct-rt"
    labels = json.loads(put[1]["imageManifest"])["annotations"]
    assert labels["dev.wheelfoundry.wheel-sha256"] == f"{wheel.name}={sha(wheel)}"
    ((name, call),) = sfn.calls
    assert name == "send_task_success" and call["taskToken"] == "TOKEN"
    assert json.loads(call["output"])["uri"] == "123.dkr.ecr/acct-rt:r1-a"
    assert "runs/r1/jobs/image-a/token" not in s3.objects  # forgotten after the callback
    # A wheel whose bytes are not what the index says: nothing is installed or pushed, the task fails.
    s3, ecr, sfn = _S3(_image_job_objects(wheel, "f" * 64)), _Recorder(), _Recorder()
    env["WF_WORK_DIR"] = str(tmp_path / "work2")
    failed = image_job.run(env, {"s3": s3, "ecr": ecr, "stepfunctions": sfn})
    assert failed["status"] == "failed" and "differs from the index's" in failed["error"] and not ecr.calls
    ((name, call),) = sfn.calls
    assert name == "send_task_failure" and call["error"] == "ImageFailed" and "differs" in call["cause"]
    assert json.loads(s3.objects["runs/r1/images/image-a/result.json"])["status"] == "failed"


def test_image_job_locks_dependencies_and_pins_from_one_upstream_index(tmp_path: Path) -> None:
    """The index wheel requires wf_dep_b; the request pins wf_extra_c: both are resolved from the upstream
    index (a folder here) with their sha256s, downloaded into the context, and installed under the same
    --require-hashes lock; pip check then holds."""
    from wfbuild.images import image_job

    upstream = tmp_path / "upstream"
    upstream.mkdir()
    dep, extra = make_wheel(upstream, "wf_dep_b", "1.2.0"), make_wheel(upstream, "wf_extra_c", "2.0")
    make_wheel(upstream, "wf_dep_b", "0.9.0")  # excluded by the requirement below
    wheel = make_wheel(tmp_path, requires="Requires-Dist: wf_dep_b>=1.0\n")
    objects = _image_job_objects(wheel, sha(wheel), pip=("wf_extra_c==2.0",))
    env = {"WF_BUCKET": "b", "WF_IMAGE_KEY": "runs/r1/images/image-a/image.json", "WF_CONTAINER": "none",
           "WF_WORK_DIR": str(tmp_path / "work"), "WF_UPSTREAM_FIND_LINKS": str(upstream)}  # fmt: skip
    result = image_job.run(env, {"s3": _S3(objects), "ecr": _Recorder(), "stepfunctions": _Recorder()})
    assert result["status"] == "pushed", result.get("trace")
    assert sorted((u["filename"], u["sha256"]) for u in result["upstream"]) == [
        (dep.name, sha(dep)), (extra.name, sha(extra))
    ]  # fmt: skip
    lock = (tmp_path / "work/image-a/context/requirements.txt").read_text().splitlines()[1:]
    assert lock == [
        f"wf-img-probe==0.1.0 --hash=sha256:{sha(wheel)}",
        f"wf-dep-b==1.2.0 --hash=sha256:{sha(dep)}",
        f"wf-extra-c==2.0 --hash=sha256:{sha(extra)}",
    ]
