"""The runner's side of the job's folder: files the build could have touched, handled as hostile.

In container mode the build runs as root inside its container with the work tree mounted read-write,
so anything under it may be a link the build planted (to a host file the runner, as root, would then
read, upload or overwrite) or a file the build rewrote. The runner therefore keeps what is its own
outside the mounted tree (``private_dir``: the env files, the job session's credentials, the final
manifest), and reads what the build wrote only through ``read_inside``/``open_inside``: no link in the
last component, a regular file, a real path inside the work tree, and a size cap.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO


class UnsafeFile(Exception):
    """A file of the build's that the runner refuses: a link, not a regular file, outside, too large."""


class Missing(UnsafeFile):
    """No such file: for a caller where absent is an answer, not a refusal."""


def private_dir(work: Path) -> Path:
    """``<work>.runner``: beside the job's folder, never mounted into a container, only root's."""
    folder = Path(f"{work}.runner")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def _inside(work: Path, fd: int, path: Path) -> None:
    real = os.path.realpath(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else os.path.realpath(path)
    root = os.path.realpath(work)
    if not real.startswith(root + os.sep):
        raise UnsafeFile(f"{path}: resolves to {real}, outside the job's folder")


def open_inside(work: Path, path: Path, limit: int | None = None) -> BinaryIO:
    """``path`` (in the job's folder) opened for reading, or UnsafeFile; the caller closes it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise Missing(f"{path}: no such file") from exc
    except OSError as exc:  # ELOOP: the last component is a link
        raise UnsafeFile(f"{path}: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFile(f"{path}: not a regular file")
        if limit is not None and info.st_size > limit:
            raise UnsafeFile(f"{path}: {info.st_size} bytes, more than {limit}")
        _inside(work, fd, path)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_inside(work: Path, path: Path, limit: int = 64 << 20) -> bytes:
    with open_inside(work, path, limit) as handle:
        return handle.read(limit + 1)[:limit]


def write_inside(work: Path, path: Path, data: bytes) -> None:
    """Write a file the in-container stages read (meta/stages.json), never through a planted link:
    the folder must resolve inside the job's folder, and the file itself must not be a link."""
    path.parent.mkdir(parents=True, exist_ok=True)
    parent = os.path.realpath(path.parent)
    if not (parent + os.sep).startswith(os.path.realpath(work) + os.sep):
        raise UnsafeFile(f"{path.parent}: resolves to {parent}, outside the job's folder")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:  # ELOOP: the build left a link there
        raise UnsafeFile(f"{path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
