"""A job's compiler cache: sccache on the stack's bucket, one server per job, its stats in the manifest.

The planner names the cache (SCCACHE_BUCKET, SCCACHE_S3_KEY_PREFIX, the CMake launcher variables); the
job session may read and write that prefix alone (wfbuild.runner.credentials). Here the runner, in host mode,
installs sccache from the bundle's hash lock (images/scripts/sccache-requirements.txt) into the cache,
starts one server with the job session's credentials on a port of its own (several jobs can share a
machine), and gives the build stages both ways in: the CMake launchers, and compiler wrappers for
builds that call the compiler themselves (setuptools: CC/CXX; torch.utils.cpp_extension: CXX and
PYTORCH_NVCC). A cache that cannot be reached never fails a build: the server does not start, the stages
compile directly and the log says so; an error mid-build falls back to a local compile
(SCCACHE_IGNORE_SERVER_IO_ERROR). The stats (requests, hits and misses per language) go into the manifest.
The reproducibility path maps (wfbuild.wheels.reproducible) name the job's folder; the wrapped compiler adds them
itself (WF_PREFIX_MAPS), so they never reach sccache's cache key.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from wfbuild.compiling.cache_stats import describe, summary
from wfbuild.compiling.cpu_usage import OOM_SCORE_ADJ, server_cpu

LAUNCHERS = ("CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER", "CMAKE_CUDA_COMPILER_LAUNCHER")
VERSION = "0.16.0"
MAP = "-ffile-prefix-map="
SHORT_TMPDIR = 60  # longer: the server starts with a TMPDIR of its own under /tmp


def wanted(env: Mapping[str, str], bucket: str) -> bool:
    return env.get("CMAKE_C_COMPILER_LAUNCHER") == "sccache" and env.get("SCCACHE_BUCKET") == bucket


def install(bundle: Path, root: Path, run: Callable[[list[str]], int]) -> Path | None:
    """sccache from the hash lock into ``root``/tools (once per machine); the binary, or None."""
    dest = root / "tools" / f"sccache-{VERSION}-{platform.machine()}"
    binary = dest / "bin" / "sccache"
    if binary.is_file():
        return binary
    lock = bundle / "images" / "scripts" / "sccache-requirements.txt"
    staging = dest.with_name(dest.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    argv = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--quiet", "--no-deps"]
    argv += ["--only-binary=:all:", "--require-hashes", "--no-compile", "--target", str(staging), "-r", str(lock)]
    if run(argv) != 0 or not (staging / "bin" / "sccache").is_file():
        shutil.rmtree(staging, ignore_errors=True)
        return None
    (staging / "bin" / "sccache").chmod(0o755)
    try:
        staging.rename(dest)
    except OSError:  # another job installed it meanwhile
        shutil.rmtree(staging, ignore_errors=True)
    return binary if binary.is_file() else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class CompilerCache:
    """One sccache server; ``folder`` (default <work>/sccache) holds its local files and the wrappers."""

    def __init__(self, binary: str, work: Path, note: Callable[[str], None], folder: Path | None = None) -> None:
        self.binary, self.work, self.note = binary, work, note
        self.folder = folder or work / "sccache"
        self.env: dict[str, str] = {}
        self.running = False
        self.problem = "not started"
        self.short_tmp: str | None = None

    def server_env(self, stage_env: Mapping[str, str]) -> dict[str, str]:
        env = {
            "SCCACHE_SERVER_PORT": str(_free_port()),
            "SCCACHE_DIR": str(self.folder),
            "SCCACHE_ERROR_LOG": str(self.folder / "server.log"),
            "SCCACHE_IGNORE_SERVER_IO_ERROR": "1",
            "SCCACHE_IDLE_TIMEOUT": "0",
            # Paths under the job's folder hash as relative ones: the same sources built under another
            # instance's (or another run's) folder get the same cache keys.
            "SCCACHE_BASEDIRS": str(self.work),
        }
        endpoint = stage_env.get("SCCACHE_ENDPOINT") or stage_env.get("AWS_ENDPOINT_URL") or ""
        if endpoint:  # the embedded AWS (or a private endpoint): path-style, plain http where given
            env["SCCACHE_ENDPOINT"] = endpoint
            env["SCCACHE_S3_USE_SSL"] = "false" if endpoint.startswith("http://") else "true"
        return env

    def start(self, stage_env: Mapping[str, str]) -> bool:
        """Start the job's server with the job session's environment; False: compile without a cache."""
        self.env = self.server_env(stage_env)
        self.folder.mkdir(parents=True, exist_ok=True)
        env = {**stage_env, **self.env}
        if len(env.get("TMPDIR") or tempfile.gettempdir()) > SHORT_TMPDIR:
            # sccache binds its start-up socket in TMPDIR, and a socket path holds 107 bytes at most: a
            # deep job folder's TMPDIR ("path must be shorter than SUN_LEN") would leave the job uncached.
            self.short_tmp = tempfile.mkdtemp(prefix="wf-sccache-", dir="/tmp")
            env["TMPDIR"] = self.short_tmp
        # The server (it daemonizes) runs the compilers: like a compile stage's, they are the OOM killer's first pick.
        argv = ["sh", "-c", f'echo {OOM_SCORE_ADJ} > /proc/self/oom_score_adj 2>/dev/null; exec "$0" "$@"']
        argv += [self.binary, "--start-server"]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        self.running = proc.returncode == 0
        where = f"s3://{stage_env.get('SCCACHE_BUCKET')}/{stage_env.get('SCCACHE_S3_KEY_PREFIX', '')}"
        if self.running:
            self.note(f"compiler cache: sccache {VERSION} on {where}")
        else:
            first = next((line for line in (proc.stderr or proc.stdout).splitlines() if "error" in line), "")
            try:  # the server's own reason ("failed to start server process" says nothing of it)
                lines = (self.folder / "server.log").read_text(errors="replace").strip().splitlines()
            except OSError:
                lines = []
            if lines:
                first = f"{first.strip()}: {lines[-1].strip()}"
            self.problem = f"{where}: {first.strip()[:300]}"
            self._drop_short_tmp()
            self.note(f"warning: compiler cache {where} unavailable ({first.strip()[:300]}): compiling without it")
        return self.running

    def _drop_short_tmp(self) -> None:
        if self.short_tmp:
            shutil.rmtree(self.short_tmp, ignore_errors=True)

    def stage_env(self, env: Mapping[str, str], wrap: bool) -> dict[str, str]:
        """A build stage's environment: the job's server, or no cache at all.

        CMake builds (torch) get the launcher variables; ``wrap`` stages (setuptools builds of domain
        libraries and extensions, which call the compiler themselves) get compiler wrappers first on PATH
        instead (cc, c++, gcc, g++ -> sccache <the real one>) and PYTORCH_NVCC for nvcc: torch's own
        cpp_extension quotes a CXX holding a wrapper into one word, so CXX itself stays a plain compiler.
        """
        out = dict(env)
        if not self.running:
            for name in LAUNCHERS:
                out.pop(name, None)
            return out | unpooled_threads(out)
        out |= self.env | {"WF_SCCACHE": "on"}
        if not wrap:
            return out | {name: self.binary for name in LAUNCHERS if name in out}
        for name in LAUNCHERS:
            out.pop(name, None)
        path = out.get("PATH", "")
        # The path maps name this job's folder: as arguments they would give every folder its own cache
        # keys. The compiler sccache runs adds them instead (a script of the same bytes in every job).
        # Only the runner's own maps (this job's folder, the host's build cache) move: a map the job or
        # the package set itself stays an argument, so it stays in the key.
        ours = {str(self.work)} | ({str(Path(out["WF_CACHE_DIR"]).resolve())} if out.get("WF_CACHE_DIR") else set())

        def moved(flag: str) -> bool:
            return flag.startswith(MAP) and flag[len(MAP) :].rsplit("=", 1)[0] in ours

        maps = [f for name in ("CFLAGS", "CXXFLAGS") for f in out.get(name, "").split() if moved(f)]
        for name in ("CFLAGS", "CXXFLAGS"):
            if name in out:
                out[name] = " ".join(f for f in out[name].split() if not moved(f))
        out["WF_PREFIX_MAPS"] = " ".join(dict.fromkeys(maps))
        out["PATH"] = os.pathsep.join([str(self.wrappers(path)), path])
        out["TORCH_NO_COMPILER_WRAPPER"] = "1"  # ours already wrap: torch's would wrap twice
        if out.get("CUDA_HOME"):
            out["PYTORCH_NVCC"] = f"{self.binary} {out['CUDA_HOME']}/bin/nvcc"
            # nvcc runs its host compiler itself: the real one, or it probes a wrapper and gives up
            host = shutil.which("c++", path=path)
            if host:
                out["NVCC_PREPEND_FLAGS"] = f"-ccbin {host} {out.get('NVCC_PREPEND_FLAGS', '')}".strip()
        return out

    def wrappers(self, path: str) -> Path:
        folder = self.folder / "wrappers"
        folder.mkdir(parents=True, exist_ok=True)
        mapped = self.folder / "mapped"
        mapped.mkdir(parents=True, exist_ok=True)
        # Debian-built interpreters name the target-prefixed driver (sysconfig CC="x86_64-linux-gnu-gcc")
        triplet = f"{platform.machine()}-linux-gnu-"
        for name in ("cc", "c++", "gcc", "g++", triplet + "gcc", triplet + "g++"):
            real = shutil.which(name, path=path)
            if real is None or (folder / name).exists():
                continue
            # WF_PREFIX_MAPS is ours (-ffile-prefix-map=<work>=. ...): split on spaces by intent. Kept out of
            # the arguments sccache hashes (SCCACHE_BASEDIRS does not rewrite a path inside a flag), and
            # the script's bytes are the same in every job: the same sources give the same key and object.
            # sccache keys on the compiler file's bytes: the real compiler's digest is in the script, so
            # another compiler at the same path (a new image, an updated gcc) is another key.
            digest = hashlib.sha256(Path(real).resolve().read_bytes()).hexdigest()
            script = (
                f'#!/bin/sh\n# {Path(real).resolve()} sha256:{digest}\nset -f\nexec "{real}" $WF_PREFIX_MAPS "$@"\n'
            )
            _atomic_script(mapped / name, script)
            _atomic_script(folder / name, f'#!/bin/sh\nexec "{self.binary}" "{mapped / name}" "$@"\n')
        return folder

    def stop(self, env: Mapping[str, str]) -> dict[str, Any]:
        """The server's stats (then it stops), or why there was no cache."""
        if not self.running:
            return {"status": "unavailable", "detail": self.problem}
        full = {**env, **self.env}
        proc = subprocess.run(
            [self.binary, "--show-stats", "--stats-format=json"], env=full, capture_output=True, text=True, timeout=60
        )
        server = server_cpu(self.env.get("SCCACHE_SERVER_PORT", ""))  # its compilers are its children
        subprocess.run([self.binary, "--stop-server"], env=full, capture_output=True, timeout=60)
        self.running = False
        self._drop_short_tmp()
        try:
            stats = summary(json.loads(proc.stdout))
        except ValueError:
            return {"error": (proc.stderr or "no stats").strip()[:300]}
        return stats if server is None else {**stats, "server_cpu_seconds": round(server, 2)}


def _atomic_script(path: Path, text: str) -> None:
    """Whole or absent, for a concurrent reader (cells of one job, threads of one runner, share the
    wrappers' folder): a staging file of its own, then a rename."""
    fd, staging = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(staging, 0o755)  # noqa: S103  (a compiler wrapper: every user of the job runs it)
    os.replace(staging, path)


def run_stage(argv: list[str], stats_file: Path, wrap: bool, environ: Mapping[str, str]) -> int:
    """Container mode: one build stage under a server of its own (the container's; it ends with the stage).

    The image carries sccache from the same hash lock host mode installs from; the stage's stats go to
    ``stats_file`` in the job's folder, where the runner (outside the container) collects them.
    """
    binary = shutil.which("sccache", path=environ.get("PATH"))
    work = Path(environ.get("WF_WORK_DIR") or os.getcwd())
    folder = stats_file.parent / stats_file.stem  # concurrent cells: a server folder each
    cache = CompilerCache(binary or "sccache", work, lambda line: print(line, flush=True), folder)
    if binary is None:
        cache.problem = "no sccache in this image"
        cache.note("warning: compiler cache unavailable (no sccache in this image): compiling without it")
    else:
        cache.start(environ)
    try:
        code = subprocess.run(argv, env=cache.stage_env(environ, wrap), check=False).returncode
    finally:
        stats = cache.stop(environ)
        stats_file.parent.mkdir(parents=True, exist_ok=True)
        stats_file.write_text(json.dumps(stats), encoding="utf-8")
        print(describe(stats), flush=True)
    return code


def unpooled_threads(env: Mapping[str, str]) -> dict[str, str]:
    """NVCC_APPEND_FLAGS for a stage whose server did not start: the runner gave each nvcc the cell's cores
    as threads for the server's pool to hold within the cores (wfbuild.compiling.parallelism.cell_slots); without it
    the last ``--threads`` (the runner's) takes the count for no pool, WF_NVCC_THREADS_UNPOOLED."""
    fewer, flags = env.get("WF_NVCC_THREADS_UNPOOLED", ""), shlex.split(env.get("NVCC_APPEND_FLAGS", ""))
    if not fewer.isdigit():
        return {}
    out = {"WF_NVCC_THREADS_POOLED": "0", "WF_NVCC_THREADS": fewer}  # wfbuild.compiling.parallel_compile's steps too
    last = max((i for i, flag in enumerate(flags[:-1]) if flag == "--threads"), default=None)
    if last is not None and flags[last + 1] == env.get("WF_NVCC_THREADS"):
        flags[last + 1] = fewer
        out["NVCC_APPEND_FLAGS"] = shlex.join(flags)
    return out


def stage_argv(stats: str, argv: list[str], wrap: bool) -> list[str]:
    """The command a container runs for one compile stage: the stage under run_stage."""
    return [
        "python3",
        "-m",
        "wfbuild.compiling.compiler_cache",
        "--stats",
        stats,
        *(["--wrap"] if wrap else []),
        "--",
        *argv,
    ]


def main(args: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python3 -m wfbuild.compiling.compiler_cache", description=run_stage.__doc__)
    parser.add_argument("--stats", type=Path, required=True, help="where the stage's cache stats go (JSON)")
    parser.add_argument("--wrap", action="store_true", help="compiler wrappers (setuptools builds), not launchers")
    parser.add_argument("argv", nargs="+", help="the stage's command, after --")
    ns = parser.parse_args(args)
    return run_stage(ns.argv, ns.stats, ns.wrap, os.environ)


if __name__ == "__main__":
    sys.exit(main())
