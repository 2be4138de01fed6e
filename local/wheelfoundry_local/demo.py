"""The main job: a real extension wheel built, published, installed and tested, all on this machine.

1. the embedded AWS starts and the real template.yaml is deployed into it;
2. examples/extension is uploaded as a source tarball, as a user would upload theirs;
3. the real state machine runs examples/requests/extension-demo.json, with progress per job;
4. the wheel is installed from the emulated index into a fresh venv and the extension's tests run.
"""

from __future__ import annotations

import concurrent.futures
import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from wheelfoundry_cli.index_server import serving

from wheelfoundry.provenance import SUFFIX
from wheelfoundry_user.failures import execution_failure, run_failures
from wheelfoundry_user.trust import Keyring, TrustedKey
from wheelfoundry_user.verify import pem_of

from .progress import Progress
from .session import EmbeddedAws, ExecutionResult

SKIP = re.compile(r"(^|/)(__pycache__|build|dist|\.pytest_cache|[^/]*\.egg-info)(/|$)|\.(so|pyc)$")
Print = Callable[[str], None]
ZIP_EPOCH = 315532800  # 1980-01-01: no wheel entry can be older (wfbuild.reproducible clamps to it too)


def pack_source(folder: Path, name: str) -> bytes:
    """A reproducible tar.gz of a source tree, without build leftovers.

    Every member carries the folder's newest file mtime: the build's SOURCE_DATE_EPOCH is the
    archive's newest member (wfbuild.reproducible), so the same files give the same wheel bytes
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


@dataclass(frozen=True)
class Wheel:
    filename: str
    url: str
    sha256: str


def index_wheels(base: str, channel: str, project: str) -> list[Wheel]:
    page_url = f"{base}/simple/{channel}/{project}/"
    page = urllib.request.urlopen(page_url).read().decode()  # noqa: S310 - our own 127.0.0.1 proxy
    found = []
    for href, name in re.findall(r'<a href="([^"]+)"[^>]*>([^<]+)</a>', page):
        link, _, fragment = href.replace("&amp;", "&").partition("#sha256=")
        found.append(Wheel(name, urljoin(page_url, link), fragment))
    return found


def user_env(cache: Path, torch_version: str, venv: Path, log: Path) -> Path:
    """A fresh venv with the user's torch, numpy, pytest and hypothesis: they live in a cached
    environment (built once, ~1 min; the demo builds it while the farm builds the wheel) that the venv
    sees through a .pth file (wfbuild.envs). pip's output goes to ``log``."""
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    argv = [sys.executable, "-m", "wfbuild.envs", "--python", python, "--dest", str(venv), "--torch"]
    argv += [f"torch=={torch_version}", "--pip", "numpy", "--pip", "pytest", "--pip", "hypothesis"]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as handle:
        done = subprocess.run(argv, env={**os.environ, "WF_CACHE_DIR": str(cache)}, stdout=handle, stderr=handle)
    if done.returncode != 0:
        raise RuntimeError(f"the user's environment could not be made: see {log}")
    return venv


def install_and_test(index: str, project: str, venv: Path, tests: Path, out: Print) -> int:
    """A user's view: a fresh venv with their torch, the wheel from the index, the extension's tests;
    the wheel under test is installed into the venv itself."""
    out(f"a fresh venv with the user's torch (from the cached environment): {venv}")
    pip = [
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-warn-script-location",
    ]
    out(f"installing {project} from the index: pip install --index-url {index} {project}")
    # --isolated: no pip.conf or PIP_* extra indexes, so the wheel can only come from our index.
    subprocess.run([*pip, "--isolated", "--index-url", index, project], check=True)
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", f"import {project.replace('-', '_')} as m; print(m.__file__)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    out(f"imported from {where}")
    out(f"running the extension's tests: {tests}")
    # Own ini file, importlib mode and another working directory: the tests import the installed
    # wheel, never the source tree, and no configuration of this repository applies.
    ini = venv / "pytest.ini"
    ini.write_text("[pytest]\naddopts = -p no:cacheprovider --import-mode=importlib\n")
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pytest", "-c", str(ini), "--rootdir", str(venv), str(tests)],
        cwd=venv,
        check=False,
    )
    return result.returncode


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


def copy_published(base: str, channel: str, project: str, dist: Path, out: Print) -> list[Wheel]:
    """Download the project's wheels from the index (sha256 checked) into ``dist`` and list them."""
    wheels = index_wheels(base, channel, project)
    dist.mkdir(parents=True, exist_ok=True)
    out("\nwheels published:")
    for wheel in wheels:
        data = urllib.request.urlopen(wheel.url).read()  # noqa: S310 - our own 127.0.0.1 proxy
        if hashlib.sha256(data).hexdigest() != wheel.sha256:
            raise ValueError(f"{wheel.filename}: sha256 differs from the index")
        (dist / wheel.filename).write_bytes(data)
        out(f"  {wheel.filename}  {len(data) / 1024:.1f} KiB  sha256:{wheel.sha256}")
        try:  # the signed provenance beside it (`wheelfoundry verify`)
            envelope = urllib.request.urlopen(wheel.url.split("#", 1)[0] + SUFFIX).read()  # noqa: S310
        except OSError:
            out(f"  {wheel.filename}: no signed provenance")
            continue
        (dist / (wheel.filename + SUFFIX)).write_bytes(envelope)
    return wheels


def save_public_key(aws: EmbeddedAws, stack: Any, dist: Path) -> Path:
    """The stack's provenance key as PEM beside the wheels: verify them after the emulator is gone."""
    der = aws.client("kms").get_public_key(KeyId=stack.outputs["ProvenanceKeyArn"])["PublicKey"]
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "wheelfoundry-provenance.pem").write_bytes(pem_of(der))
    return dist / "wheelfoundry-provenance.pem"


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
    """Build ``source`` through the embedded AWS, publish, copy the wheels to ``dist``; with ``test``
    also install from the index into a fresh venv and run the source's tests (``local demo``)."""
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
    with pool, EmbeddedAws(state_dir=state_dir, registration_delay=1.0, agent_output=progress.on_output) as aws:
        out("deploying template.yaml into the embedded AWS (moto server on 127.0.0.1)")
        stack = aws.deploy(root / "template.yaml", parameters={"BuildHeartbeatSeconds": "120"})
        s3, bucket = aws.client("s3"), stack.outputs["WheelBucketName"]
        request["source"] = {"s3": upload_source(aws, stack, source, project)}
        out(f"uploaded {source} as {request['source']['s3']}; running {request_path.name}")
        result = run_request(aws, stack, request, out, progress, timeout)
        if not result.succeeded:
            explain_failure(s3, bucket, result, state_dir, out, debug)
            return 1
        channel = result.output["channel"]
        layout = show_layout(s3, bucket, result, channel, out)
        key = save_public_key(aws, stack, dist)
        trusted = Keyring((TrustedKey(key.read_bytes(), str(key), stack.outputs["ProvenanceKeyArn"]),))
        with serving(s3, bucket, keys=trusted) as base:  # pip gets only wheels whose provenance verifies
            index = f"{base}/simple/{channel}/"
            if layout == "per-cell" and users is not None:  # the index of the user's (torch, CPU) variant
                index = f"{base}/simple/{channel}/torch-{_exact_torch(next(iter(request['torch'])))}+cpu/"
            copy_published(base, channel, project, dist, out)
            out(f"verify offline: wheelfoundry verify {dist}/*.whl --public-key {key}")
            out(f"index: {index}  (s3://{bucket}/simple/{channel}/); wheels copied to {dist}/")
            if users is not None:
                code = install_and_test(index, project, users.result(), source / "tests", out)
        left = aws.instances()
        out(f"instances still pending/running in the emulator: {len(left)}")
    what = "demo" if test else "run"
    out(f"{what} {'passed' if code == 0 and not left else 'FAILED'} in {time.monotonic() - started:.0f}s")
    return 0 if code == 0 and not left else 1


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
    from wheelfoundry.catalog import load_catalog
    from wheelfoundry.resolve import resolve_version

    return resolve_version(spec, load_catalog()).torch_version or spec
