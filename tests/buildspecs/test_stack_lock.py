"""A stack's toolkit lock (wfbuild.cuda.stack_lock): the contract names its key and sha256; the runner uses only
those bytes, host mode's toolkit cache key and container mode's builder image tag follow the digest."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.buildspecs.jobs import ROOT
from wfbuild.cuda import stack_lock, toolkit
from wfbuild.images import container

BUNDLE = ROOT / "buildspecs"
LOCK = (BUNDLE / "images/scripts/cuda/cuda-13.0-x86_64.toml").read_bytes()  # any real lock's bytes will do
SHA = hashlib.sha256(LOCK).hexdigest()
KEY = f"toolkits/cuda-13.0-x86_64-{SHA[:16]}.toml"


def job(sha: str = SHA, key: str = KEY) -> dict[str, object]:
    return {"platform": "x86_64", "run": {"bucket": "wf"}, "toolkit_lock": {"key": key, "sha256": sha}}


def bucket(body: bytes = LOCK) -> stack_lock.Get:
    def get(name: str, key: str) -> bytes:
        assert (name, key) == ("wf", KEY)
        return body

    return get


def test_the_lock_is_kept_where_install_cuda_reads_it_once_its_bytes_match(tmp_path: Path) -> None:
    where = stack_lock.fetch(bucket(), "wf", job(), "13.0", "x86_64", tmp_path)
    assert where == tmp_path / "toolkits" / "stack-locks" / SHA
    assert (where / "cuda-13.0-x86_64.toml").read_bytes() == LOCK
    assert toolkit.installer(BUNDLE).load_lock("13.0", "x86_64", where)["cuda"] == "13.0"


def test_other_bytes_than_the_contract_names_are_refused_by_key_and_both_digests(tmp_path: Path) -> None:
    tampered = LOCK.replace(b"13.0", b"13.1", 1)
    with pytest.raises(stack_lock.StackLockError) as refused:
        stack_lock.fetch(bucket(tampered), "wf", job(), "13.0", "x86_64", tmp_path)
    message = str(refused.value)
    assert KEY in message and SHA in message and hashlib.sha256(tampered).hexdigest() in message
    assert not (tmp_path / "toolkits" / "stack-locks").exists()  # nothing kept to install


def test_a_malformed_or_foreign_lock_is_refused(tmp_path: Path) -> None:
    with pytest.raises(stack_lock.StackLockError, match="not a toolkits/ key"):
        stack_lock.fetch(bucket(), "wf", job(key="../etc/passwd"), "13.0", "x86_64", tmp_path)
    with pytest.raises(stack_lock.StackLockError, match=r"not a CUDA 13\.2 x86_64 lock"):
        stack_lock.fetch(bucket(), "wf", job(), "13.2", "x86_64", tmp_path)
    assert stack_lock.fetch(bucket(), "wf", {"platform": "x86_64"}, "13.0", "x86_64", tmp_path) is None


def test_the_toolkit_cache_key_follows_the_stack_locks_digest(tmp_path: Path) -> None:
    where = stack_lock.fetch(bucket(), "wf", job(), "13.0", "x86_64", tmp_path)
    same = toolkit.prefix_for(BUNDLE, "13.0", "x86_64", [], tmp_path, where)
    other = tmp_path / "other"
    other.mkdir()
    (other / "cuda-13.0-x86_64.toml").write_bytes(LOCK + b"\n# another lock\n")
    assert toolkit.prefix_for(BUNDLE, "13.0", "x86_64", [], tmp_path, other) != same
    assert stack_lock.folder(job(), tmp_path) == where


def test_container_mode_makes_the_builder_image_with_the_stack_lock(tmp_path: Path) -> None:
    # the copy of images/ holds the stack's bytes where install_cuda.py reads the bundle's lock; the image's tag
    # (its Dockerfile, scripts and build arguments) follows those bytes, and docker builds from that copy
    contract = {**job(), "image": {"recipe": "x86_64-cuda", "base": "quay.io/pypa/manylinux_2_28_x86_64",
                                   "build_args": {"CUDA_VERSION": "13.0"}}}  # fmt: skip
    assert stack_lock.image_bundle(bucket(), {**contract, "toolkit_lock": None}, BUNDLE, tmp_path) == BUNDLE
    stack_bytes = LOCK + b"\n# written by the watcher\n"
    sha = hashlib.sha256(stack_bytes).hexdigest()
    key = f"toolkits/cuda-13.0-x86_64-{sha[:16]}.toml"
    watched = {**contract, "toolkit_lock": {"key": key, "sha256": sha}}
    made = stack_lock.image_bundle(lambda _b, _k: stack_bytes, watched, BUNDLE, tmp_path / "w")
    assert (made / "images/scripts/cuda/cuda-13.0-x86_64.toml").read_bytes() == stack_bytes
    assert (made / "images/x86_64-cuda.Dockerfile").read_bytes() == (
        BUNDLE / "images/x86_64-cuda.Dockerfile"
    ).read_bytes()
    assert container.image_tag(watched, made) != container.image_tag(contract, BUNDLE)
    argv = container.build_argv(watched, made, "t")
    assert argv[-1] == str(made / "images") and str(made / "images/x86_64-cuda.Dockerfile") in argv
    with pytest.raises(stack_lock.StackLockError, match="refusing it"):  # bytes changed after Validate named them
        stack_lock.image_bundle(lambda _b, _k: LOCK, watched, BUNDLE, tmp_path / "x")
