"""Issue 10 item 3: a source archive's extraction refuses absolute paths, '..', links outside the tree
and device files, before it writes anything."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from wfbuild.runner.source import UnsafeArchive, extract, unpack


def _tar(path: Path, *members: tarfile.TarInfo) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        ok = tarfile.TarInfo("pkg/setup.py")
        ok.size = 3
        tf.addfile(ok, io.BytesIO(b"x=1"))
        for member in members:
            data = b"evil" if member.isfile() else b""
            member.size = len(data)
            tf.addfile(member, io.BytesIO(data) if data else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


UNSAFE_TAR = {
    "absolute-path": _member("/tmp/wf-evil"),
    "dot-dot": _member("pkg/../../wf-evil"),
    "symlink-absolute": _member("pkg/passwd", tarfile.SYMTYPE, "/etc/passwd"),
    "symlink-up": _member("pkg/up", tarfile.SYMTYPE, "../../outside"),
    "symlink-chain-through-dot-dot": _member("pkg/a", tarfile.SYMTYPE, "b/.."),
    "hardlink-outside": _member("pkg/hard", tarfile.LNKTYPE, "../../etc/passwd"),
    "hardlink-absolute": _member("pkg/hard", tarfile.LNKTYPE, "/etc/passwd"),
    "char-device": _member("pkg/null", tarfile.CHRTYPE),
    "block-device": _member("pkg/sda", tarfile.BLKTYPE),
    "fifo": _member("pkg/fifo", tarfile.FIFOTYPE),
}


@pytest.mark.parametrize("case", sorted(UNSAFE_TAR))
def test_unsafe_tar_member_is_refused_before_anything_is_written(case: str, tmp_path: Path) -> None:
    archive = _tar(tmp_path / "src.tar.gz", UNSAFE_TAR[case])
    dest = tmp_path / "out" / "src"
    with pytest.raises(UnsafeArchive):
        extract(archive, dest)
    assert list(dest.iterdir()) == []  # nothing, not even the safe member, was unpacked
    assert not (tmp_path / "wf-evil").exists() and not Path("/tmp/wf-evil").exists()


def test_links_inside_the_tree_are_kept(tmp_path: Path) -> None:
    archive = _tar(
        tmp_path / "src.tar.gz",
        _member("pkg/README", tarfile.SYMTYPE, "setup.py"),
        _member("pkg/docs/readme", tarfile.SYMTYPE, "sub/x"),
        _member("pkg/copy.py", tarfile.LNKTYPE, "pkg/setup.py"),
    )
    dest = unpack(archive, tmp_path / "work" / "src" / "pkg")
    assert (dest / "README").is_symlink() and (dest / "README").read_text() == "x=1"
    assert (dest / "copy.py").read_text() == "x=1" and (dest / "setup.py").read_text() == "x=1"


def _zip(path: Path, name: str, mode: int = 0) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("pkg/setup.py", "x=1")
        info = zipfile.ZipInfo(name)
        info.external_attr = mode << 16
        zf.writestr(info, "/etc/passwd")
    return path


UNSAFE_ZIP = {
    "absolute-path": ("/tmp/wf-evil", 0),
    "dot-dot": ("pkg/../../wf-evil", 0),
    "backslash-root": ("\\wf-evil", 0),
    "symlink": ("pkg/passwd", stat.S_IFLNK | 0o777),
    "char-device": ("pkg/null", stat.S_IFCHR | 0o666),
}


@pytest.mark.parametrize("case", sorted(UNSAFE_ZIP))
def test_unsafe_zip_member_is_refused(case: str, tmp_path: Path) -> None:
    name, mode = UNSAFE_ZIP[case]
    archive = _zip(tmp_path / "src.zip", name, mode)
    dest = tmp_path / "out"
    with pytest.raises(UnsafeArchive):
        extract(archive, dest)
    assert list(dest.iterdir()) == []


def test_a_lone_symlink_is_not_taken_for_the_source_root(tmp_path: Path) -> None:
    with tarfile.open(tmp_path / "src.tar.gz", "w:gz") as tf:
        tf.addfile(_member("pkg", tarfile.SYMTYPE, "."))
    dest = unpack(tmp_path / "src.tar.gz", tmp_path / "work" / "src" / "pkg")
    assert dest.is_dir() and not dest.is_symlink()
