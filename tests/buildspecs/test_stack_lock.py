"""Host mode with a stack's toolkit lock (wfbuild.cuda.stack_lock, wfbuild.cuda.toolkit): the contract names the lock's key
and sha256; the runner installs only those bytes, and the toolkit's cache key follows the digest."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.buildspecs.jobs import ROOT
from wfbuild.cuda import stack_lock, toolkit

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
