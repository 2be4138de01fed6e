"""Fetch an extension's source archive from S3 and unpack it safely.

``python -m wfbuild.runner.source --s3 s3://bucket/sources/x.tar.gz --dest WORK/src/NAME [--meta WORK/meta]``

Runs on the host (it needs the instance's AWS role). Archives may be .tar.gz/.tgz or .zip; no
member may leave the destination: absolute paths, '..', links pointing outside the tree, devices
and FIFOs are refused before anything is written. An archive
holding a single top-level directory (``name-1.0/...``, as sdists do) is unpacked one level up.
The archive's sha256, S3 ETag/VersionId and newest member mtime (the build's SOURCE_DATE_EPOCH) go to
``meta/sources/<NAME>.json`` for the manifest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import stat
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

import boto3

from wfbuild.safety import S3_URL, check
from wfbuild.wheels.reproducible import archive_epoch


class UnsafeArchive(ValueError):
    pass


def _safe_name(name: str) -> None:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or name.startswith("\\") or "\0" in name:
        raise UnsafeArchive(f"archive member {name!r} would leave the destination")


def _check_link(member: tarfile.TarInfo) -> None:
    """A link may only point at something inside the tree, by a path that only goes down.

    A symlink's target is relative to its own directory and may not contain '..': lexical checks
    of '..' are not enough once one link points at another (``a -> b/..`` where ``b -> ../x``).
    A hard link names another member of the archive, which must itself be a safe name.
    """
    target = member.linkname
    if member.issym():
        if not target or PurePosixPath(target).is_absolute() or ".." in PurePosixPath(target).parts:
            raise UnsafeArchive(f"archive member {member.name!r} links outside the tree ({target!r})")
    else:
        try:
            _safe_name(target)
        except UnsafeArchive:
            raise UnsafeArchive(f"archive member {member.name!r} links outside the tree ({target!r})") from None


def _zip_members(zf: zipfile.ZipFile) -> None:
    for info in zf.infolist():
        _safe_name(info.filename)
        kind = stat.S_IFMT(info.external_attr >> 16)  # Unix mode bits, where the writer stored them
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise UnsafeArchive(f"archive member {info.filename!r} is not a file or directory")


def extract(archive: Path, dest: Path) -> None:
    """Unpack ``archive`` into ``dest``; raise UnsafeArchive before writing anything if any member would
    leave it: absolute names, '..', links pointing outside, devices, FIFOs."""
    dest.mkdir(parents=True, exist_ok=True)
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            _zip_members(zf)
            zf.extractall(dest)  # noqa: S202  (every member was checked above)
        return
    with tarfile.open(archive, "r:*") as tf:
        for member in tf.getmembers():
            _safe_name(member.name)
            if member.issym() or member.islnk():
                _check_link(member)
            elif not (member.isfile() or member.isdir()):  # devices and FIFOs have no place in a source tree
                raise UnsafeArchive(f"archive member {member.name!r} is not a file, directory or link")
        if hasattr(tarfile, "data_filter"):  # Python >= 3.9.17 / 3.11.4: a second line of defence
            tf.extractall(dest, filter="data")
        else:
            tf.extractall(dest)  # noqa: S202  (every member was checked above)


def unpack(archive: Path, dest: Path) -> Path:
    """Unpack into ``dest`` (replaced); a lone top-level directory becomes ``dest`` itself."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wf-src-", dir=dest.parent) as tmp:
        extract(archive, Path(tmp))
        entries = list(Path(tmp).iterdir())
        lone = len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink()
        root = entries[0] if lone else Path(tmp)
        if dest.exists():
            shutil.rmtree(dest)
        if root == Path(tmp):
            dest.mkdir()
            for entry in entries:
                entry.rename(dest / entry.name)
        else:
            root.rename(dest)
    return dest


def fetch(url: str, dest: Path, meta: Path | None) -> Path:
    check(S3_URL, url, "source_s3")
    bucket, key = url[len("s3://") :].split("/", 1)
    s3 = boto3.client("s3", region_name=os.environ.get("AWS_REGION"))
    dest.parent.mkdir(parents=True, exist_ok=True)
    suffix = ".zip" if key.endswith(".zip") else ".tar.gz"
    with tempfile.TemporaryDirectory(prefix="wf-fetch-") as tmp:
        archive = Path(tmp) / f"source{suffix}"
        head = s3.head_object(Bucket=bucket, Key=key)
        s3.download_file(bucket, key, str(archive))
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        epoch = archive_epoch(archive)
        unpack(archive, dest)
    record = {"s3": url, "sha256": digest, "etag": head.get("ETag", "").strip('"'), "version_id": head.get("VersionId")}
    record["source_date_epoch"] = epoch  # the build's SOURCE_DATE_EPOCH (wfbuild.wheels.reproducible)
    print(f"source: {url} -> {dest} (sha256 {digest})")
    if meta is not None:
        (meta / "sources").mkdir(parents=True, exist_ok=True)
        (meta / "sources" / f"{dest.name}.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wfbuild.runner.source", description="Fetch an extension's source.")
    parser.add_argument("--s3", required=True)
    parser.add_argument("--dest", required=True, type=Path)
    parser.add_argument("--meta", type=Path, help="default: <dest>/../../meta")
    args = parser.parse_args(argv)
    fetch(args.s3, args.dest, args.meta or args.dest.parent.parent / "meta")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
