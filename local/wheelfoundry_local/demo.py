"""The main job: a real extension wheel built, published, installed and tested, all on this machine.

1. the embedded AWS starts and the real template.yaml is deployed into it, the run's channel public;
2. examples/extension is uploaded as a source tarball, as a user would upload theirs;
3. the real state machine runs examples/requests/extension-demo.json, with progress per job;
4. the wheel is installed from the public index (the local edge, no AWS credentials) into a fresh venv
   and the extension's tests run (consumer.py).
"""

from __future__ import annotations

import concurrent.futures
import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wheelfoundry.publishing.index_variants import VARIANT_NAME
from wheelfoundry_user import archs
from wheelfoundry_user.failures import execution_failure, run_failures
from wheelfoundry_user.public import PublicIndex, pinned_keyring
from wheelfoundry_user.verify import pem_of

from .consumer import copy_published, install_and_test, user_env, uv_binary, uv_env
from .edge import serving_edge
from .newer_torch import seed as seed_newer_torch
from .progress import Progress
from .session import EmbeddedAws, ExecutionResult

__all__ = ["copy_published", "explain_failure", "pack_source", "run_demo", "run_request", "upload_source"]

SKIP = re.compile(r"(^|/)(__pycache__|build|dist|\.pytest_cache|[^/]*\.egg-info)(/|$)|\.(so|pyc)$")
Print = Callable[[str], None]
ZIP_EPOCH = 315532800  # 1980-01-01: no wheel entry can be older (wfbuild.wheels.reproducible clamps to it too)


def pack_source(folder: Path, name: str) -> bytes:
    """A reproducible tar.gz of a source tree, without build leftovers.

    Every member carries the folder's newest file mtime: the build's SOURCE_DATE_EPOCH is the
    archive's newest member (wfbuild.wheels.reproducible), so the same files give the same wheel bytes
    wherever they are, and a changed file gives a later time."""
    files = [p for p in sorted(folder.rglob("*")) if p.is_file() and not SKIP.search(p.relative_to(folder).as_posix())]
    newest = max([ZIP_EPOCH, *(int(p.stat().st_mtime) for p in files)])
    buffer = io.BytesIO()
    # mtime=0 in the gzip header: the archive's own bytes depend on the files alone
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path in files:
            relative = path.relative_to(folder).as_posix()
            info = tar.gettarinfo(str(path), arcname=f"{name}/{relative}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = newest, 0, 0, "", ""
            info.mode = 0o755 if info.mode & 0o111 else 0o644
            with path.open("rb") as handle:
                tar.addfile(info, handle)
    return buffer.getvalue()


def run_request(
    aws: EmbeddedAws, stack: Any, request: dict[str, Any], out: Print, progress: Progress, timeout: float
) -> ExecutionResult:
    arn = aws.start_execution(stack.state_machine_arn, request)
    out(f"started {arn.rsplit(':', 1)[-1]}")
    progress.run = arn.rsplit(":", 1)[-1]  # the run's id is its execution's name: its jobs only
    sfn = aws.client("stepfunctions")
    deadline = time.monotonic() + timeout
    while sfn.describe_execution(executionArn=arn)["status"] == "RUNNING":
        for line in progress.update(stack, aws.invocations):
            out(line)
        for line in progress.still_running(quiet=30):  # a long stage's clock; never a finished job's line
            out(line)
        if time.monotonic() > deadline:
            raise TimeoutError(f"the execution did not finish in {timeout:.0f}s")
        time.sleep(0.5)
    for line in progress.update(stack, aws.invocations):
        out(line)
    return aws.wait_execution(arn, timeout=5)


def check_source(source: Path) -> None:
    """Refuse, before anything starts, a --source that is neither a folder nor an sdist ``.tar.gz``."""
    if source.is_dir():
        return
    if not (source.is_file() and source.name.endswith((".tar.gz", ".tgz")) and tarfile.is_tarfile(source)):
        raise ValueError(f"--source {source}: expected a source folder or an sdist .tar.gz")


def source_bytes(source: Path, project: str) -> bytes:
    """What a --source uploads: a folder packed here, an sdist ``.tar.gz`` as it is."""
    check_source(source)
    return pack_source(source, project) if source.is_dir() else source.read_bytes()


def upload_source(aws: EmbeddedAws, stack: Any, source: Path, project: str) -> str:
    """A source folder (packed here) or an sdist ``.tar.gz`` into the stack's bucket; returns its s3:// URI."""
    body = source_bytes(source, project)
    s3, bucket = aws.client("s3"), stack.outputs["WheelBucketName"]
    key = f"sources/{project}-{hashlib.sha256(body).hexdigest()[:12]}.tar.gz"
    s3.put_object(Bucket=bucket, Key=key, Body=body)
    return f"s3://{bucket}/{key}"


def run_demo(
    root: Path,
    request_path: Path,
    source: Path,
    state_dir: Path,
    dist: Path,
    out: Print = print,
    timeout: float = 1800,
    test: bool = True,
    debug: bool = False,
) -> int:
    """Build ``source`` through the embedded AWS, publish to a public channel, copy the wheels to ``dist``
    through the edge (verified against the pinned key); with ``test`` also install from the public index
    into a fresh venv with no AWS credentials and run the source's tests (``local demo``)."""
    check_source(source)
    request = json.loads(request_path.read_text())
    project = request["name"]
    progress = Progress()
    started = time.monotonic()
    code = 0
    cache = Path(os.environ.get("WF_CACHE_DIR") or state_dir / "cache")  # the embedded AWS's build cache too
    users: concurrent.futures.Future[Path] | None = None
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    if test:  # the user's environment is made while the farm builds (pip under a file lock: no clash)
        torch_version = _exact_torch(next(iter(request["torch"])))
        out(f"preparing the user's environment (torch=={torch_version}, pytest) under {cache}/envs meanwhile")
        users = pool.submit(user_env, cache, torch_version, state_dir / "demo-venv", state_dir / "demo-venv.log")
    with pool, EmbeddedAws(state_dir=state_dir, agent_output=progress.on_output) as aws:
        public = request.get("channel") or "extensions"  # the channel the run publishes to is a public one
        out(f"deploying template.yaml into the embedded AWS (moto server on 127.0.0.1), PublicChannels={public}")
        stack = aws.deploy(
            root / "template.yaml", parameters={"BuildHeartbeatSeconds": "120", "PublicChannels": public}
        )
        s3, bucket = aws.client("s3"), stack.outputs["WheelBucketName"]
        seed_newer_torch(s3, bucket, request, out)  # a torch newer than the catalog: what the watcher would write
        request["source"] = {"s3": upload_source(aws, stack, source, project)}
        out(f"uploaded {source} as {request['source']['s3']}; running {request_path.name}")
        result = run_request(aws, stack, request, out, progress, timeout)
        show_device_code(s3, bucket, result, out)
        if not result.succeeded:
            explain_failure(s3, bucket, result, state_dir, out, debug)
            return 1
        channel = result.output["channel"]
        show_layout(s3, bucket, result, channel, out)
        with serving_edge(aws, stack) as edge:  # what anyone gets from the distribution, no credentials
            fingerprint = save_public_key(aws, stack, dist)
            public_index = f"{stack.outputs['PublicIndexUrl']}{channel}/"
            index = edge.local(public_index)
            variants = show_variant_indexes(result.output.get("public") or {}, edge.local, out)
            out(f"public index: {public_index}  (served here by the local edge: {index})")
            for page in (result.output.get("public") or {}).get("find_links") or []:
                out(f"  find-links: pip install {project} -f {page}  (here: {edge.local(page)})")
            out(f"provenance key fingerprint (what users pin): {fingerprint}")
            keys = pinned_keyring(PublicIndex.parse(index), [fingerprint])
            copy_published(edge.url, channel, project, dist, out, keys)
            out(f"verify: wheelfoundry verify --index-url {public_index} --key-fingerprint {fingerprint}")
            out(f"wheels copied to {dist}/ (private copy: s3://{bucket}/wheels/{channel}/)")
            if users is not None:
                code = install_both(request, variants, index, project, users.result(), source / "tests", out)
        left = aws.instances()
        out(f"instances still pending/running in the emulator: {len(left)}")
    what = "demo" if test else "run"
    out(f"{what} {'passed' if code == 0 and not left else 'FAILED'} in {time.monotonic() - started:.0f}s")
    return 0 if code == 0 and not left else 1


def show_variant_indexes(public: dict[str, Any], local: Callable[[str], str], out: Print) -> dict[str, str]:
    """Each variant index the run's channel has (one per torch minor and CPU/CUDA variant: the whole channel
    as that user needs it), first: what a user of that torch types. Short name -> the URL served here."""
    served = {name: local(url) for name, url in (public.get("variant_indexes") or {}).items()}
    out("")
    for name, url in served.items():
        m = VARIANT_NAME.fullmatch(name)
        what = f"torch {m['major']}.{m['minor']}, {m['label']}" if m else name
        out(f"variant index ({what}): {url}  (public: {public['variant_indexes'][name]})")
    return served


def install_both(
    request: dict[str, Any],
    variants: dict[str, str],
    channel_index: str,
    project: str,
    users: Path,
    tests: Path,
    out: Print,
) -> int:
    """The published wheel through the variant index of the user's (torch, CPU) into two fresh venvs, with pip
    and with uv, the extension's tests in each; 0 when both passed. The channel-wide index where the channel
    has no such variant index (a request without a CPU cell)."""
    torch = _exact_torch(next(iter(request["torch"])))
    name = "torch{}.{}-cpu".format(*torch.split(".")[:2])
    index = variants.get(name)
    if index is None:
        out(f"no variant index {name} (the request has no CPU cell of torch {torch}): the channel's index instead")
        index = channel_index
    uv = uv_binary()
    venv = uv_env(uv, users, users.with_name(f"{users.name}-uv"), users.with_name(f"{users.name}-uv.log"))
    codes = {
        "pip": install_and_test(index, project, users, tests, out),
        "uv": install_and_test(index, project, venv, tests, out, uv=uv),
    }
    out(", ".join(f"{k} {'passed' if c == 0 else 'FAILED'}" for k, c in codes.items()) + f" through {index}")
    return max(codes.values())


def show_device_code(s3: Any, bucket: str, result: ExecutionResult, out: Print) -> None:
    """Per CUDA cell the architectures its build holds (or why it was refused), from the jobs' manifests."""
    run = result.arn.rsplit(":", 1)[1]
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"runs/{run}/jobs/")
    keys = [o["Key"] for page in pages for o in page.get("Contents", []) if o["Key"].endswith("/manifest.json")]
    for line in archs.lines({k: json.loads(s3.get_object(Bucket=bucket, Key=k)["Body"].read()) for k in keys}):
        out(line)


def save_public_key(aws: EmbeddedAws, stack: Any, dist: Path) -> str:
    """The stack's provenance key as PEM beside the wheels (verify them after the emulator is gone); its
    fingerprint, as `wheelfoundry public-key` prints it for a maintainer to give the users."""
    der = aws.client("kms").get_public_key(KeyId=stack.outputs["ProvenanceKeyArn"])["PublicKey"]
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "wheelfoundry-provenance.pem").write_bytes(pem_of(der))
    return hashlib.sha256(der).hexdigest()


def show_layout(s3: Any, bucket: str, result: ExecutionResult, channel: str, out: Print) -> str | None:
    """Which layout the run published, why, and (per-cell) its per-(torch, CUDA) find-links pages."""
    run = result.arn.rsplit(":", 1)[1]
    try:
        merge = json.loads(s3.get_object(Bucket=bucket, Key=f"runs/{run}/merge.json")["Body"].read())
    except s3.exceptions.NoSuchKey:
        return None
    layout = merge.get("layout")
    out(f"layout {layout}: {merge.get('layout_reason')}")
    listing = s3.list_objects_v2(Bucket=bucket, Prefix=f"simple/{channel}/torch-").get("Contents", [])
    for page in sorted(o["Key"] for o in listing if o["Key"].endswith(".html")):
        out(f"  find-links page (pip install NAME -f URL): {page}")
    return str(layout) if layout else None


def explain_failure(s3: Any, bucket: str, result: ExecutionResult, state_dir: Path, out: Print, debug: bool) -> None:
    """Per failed job: the stage, the cause line(s), the log (also copied here); raw payloads with --debug."""
    run = result.arn.rsplit(":", 1)[1]

    def get_json(key: str) -> Any:
        try:
            return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        except s3.exceptions.NoSuchKey:
            return None

    failures = run_failures(get_json, run)
    local_logs = {}
    for failure in failures:
        if failure.log_key:
            path = state_dir / "logs" / run / f"{failure.job}.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                s3.download_file(bucket, failure.log_key, str(path))
            except Exception:  # noqa: S112 (the S3 key is still printed)
                continue
            local_logs[failure.job] = str(path)
    for line in execution_failure(result.status, result.error, result.cause, failures, bucket, local_logs=local_logs):
        out(line)
    if debug:
        out(f"--debug: execution error {result.error}, cause as Step Functions recorded it:\n{result.cause}")


def _exact_torch(spec: str) -> str:
    from wheelfoundry.catalog.catalog import load_catalog
    from wheelfoundry.catalog.resolve import resolve_version

    return resolve_version(spec, load_catalog()).torch_version or spec
