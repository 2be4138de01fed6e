"""wfbuild.wheels.reproducible: SOURCE_DATE_EPOCH from the source, compiler path maps, deterministic wheel archives."""

from __future__ import annotations

import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

from tests.buildspecs.jobs import jobs, plan_extension_job
from wfbuild.stages.stages import render_stages
from wfbuild.wheels import reproducible


def _wheel(path: Path, entries: list[tuple[str, bytes, int, tuple[int, ...]]]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data, mode, stamp in entries:
            info = zipfile.ZipInfo(name, date_time=stamp)  # type: ignore[arg-type]
            info.external_attr = (0o100000 | mode) << 16
            zf.writestr(info, data)
    return path


def test_normalize_gives_the_same_bytes_whatever_order_times_and_umask(tmp_path: Path) -> None:
    so, py = ("pkg/_C.so", b"\x7fELF...", 0o775), ("pkg/__init__.py", b"x = 1\n", 0o664)
    record = ("pkg-1.0.dist-info/RECORD", b"pkg/_C.so,,\n", 0o600)
    meta = ("pkg-1.0.dist-info/METADATA", b"Name: pkg\n", 0o644)
    a = _wheel(tmp_path / "a.whl", [(*e, (2024, 5, 1, 12, 0, 0)) for e in (record, so, meta, py)])
    b = _wheel(tmp_path / "b.whl", [(*e, (2025, 1, 2, 3, 4, 6)) for e in (py, meta, so, record)])
    assert a.read_bytes() != b.read_bytes()
    for wheel in (a, b):
        reproducible.normalize(wheel, 1700000000)
    assert a.read_bytes() == b.read_bytes()
    with zipfile.ZipFile(a) as zf:
        infos = zf.infolist()
        assert [i.filename for i in infos] == [so[0], py[0], meta[0], record[0]]  # dist-info last, RECORD at the end
        assert {i.date_time for i in infos} == {(2023, 11, 14, 22, 13, 20)}
        assert [(i.external_attr >> 16) & 0o777 for i in infos] == [0o755, 0o644, 0o644, 0o644]
        assert zf.read(so[0]) == so[1]  # member bytes (and so RECORD) unchanged


def test_normalize_never_stamps_before_1980(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "w.whl", [("a.py", b"", 0o644, (2020, 1, 1, 0, 0, 0))])
    reproducible.normalize(wheel, 0)
    with zipfile.ZipFile(wheel) as zf:
        assert zf.infolist()[0].date_time == (1980, 1, 1, 0, 0, 0)


def test_source_date_epoch_comes_from_the_archive_or_the_commit(tmp_path: Path) -> None:
    meta = tmp_path / "meta"
    assert reproducible.source_date_epoch(meta, "ext") is None
    (meta / "commits").mkdir(parents=True)
    (meta / "commits" / "ext.epoch").write_text("1712345678\n")
    assert reproducible.source_date_epoch(meta, "ext") == (1712345678, "commit time of the checked-out commit")
    (meta / "sources").mkdir()
    (meta / "sources" / "ext.json").write_text(json.dumps({"sha256": "x", "source_date_epoch": 1700000000}))
    assert reproducible.source_date_epoch(meta, "ext") == (1700000000, "newest member mtime of the source archive")
    assert reproducible.epoch_env(meta, "ext") == {"SOURCE_DATE_EPOCH": "1700000000"}


def test_archive_epoch_is_the_newest_member(tmp_path: Path) -> None:
    archive = tmp_path / "src.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, mtime in (("a/setup.py", 1600000000), ("a/x.cpp", 1650000000)):
            info = tarfile.TarInfo(name)
            info.mtime, info.size = mtime, 1
            tar.addfile(info, io.BytesIO(b"x"))
    assert reproducible.archive_epoch(archive) == 1650000000


def test_path_maps_keep_the_packages_flags_and_put_nested_folders_last() -> None:
    env = reproducible.flags_env([("/w/cache", "/cache"), ("/w/", ".")], {"CFLAGS": "-O2"})
    assert env["CFLAGS"] == "-O2 -ffile-prefix-map=/w=. -ffile-prefix-map=/w/cache=/cache"  # GCC: the last match wins
    assert env["CXXFLAGS"] == "-ffile-prefix-map=/w=. -ffile-prefix-map=/w/cache=/cache"
    assert env["NVCC_APPEND_FLAGS"] == "-Xcompiler=-ffile-prefix-map=/w=. -Xcompiler=-ffile-prefix-map=/w/cache=/cache"
    assert reproducible.flags_env([("/work", "/work")], {}) == {}


def test_every_build_stage_maps_its_work_folder_framework_builds_included(tmp_path: Path) -> None:
    torch = next(iter(jobs("torch-2.5.1").values()))
    extension = plan_extension_job("wf-example-ops", "s3://wf-bucket/sources/wf-example-ops.tar.gz")
    for job in (torch, extension):
        for work in ("/work", str(tmp_path)):
            builds = [s for s in render_stages(job, work_dir=work) if s.name.startswith("build-")]
            assert builds
            for stage in builds:
                assert f"-ffile-prefix-map={work}=." in stage.env["CFLAGS"].split(), stage.name
                assert f"-Xcompiler=-ffile-prefix-map={work}=." in stage.env["NVCC_APPEND_FLAGS"].split()


def test_a_local_source_folder_packs_to_the_same_bytes_with_its_newest_mtime(tmp_path: Path) -> None:
    from wheelfoundry_local.demo import pack_source

    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "setup.py").write_text("setup()\n")
    (src / "pkg" / "x.cpp").write_text("int x;\n")
    os.utime(src / "setup.py", (1600000000, 1600000000))
    os.utime(src / "pkg" / "x.cpp", (1650000000, 1650000000))
    first = pack_source(src, "pkg-1.0")
    assert pack_source(src, "pkg-1.0") == first
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(first)
    assert reproducible.archive_epoch(archive) == 1650000000
    with tarfile.open(archive) as tar:
        assert {m.mtime for m in tar.getmembers()} == {1650000000}
