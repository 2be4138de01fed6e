"""Deriving a toolkit's facts from the index's wheels by Range reads (wheelfoundry.toolkits.toolkit_facts, remote_wheel,
fatbin_headers). No network: the wheels are built here, served by a ``get`` that honours Range.

The synthetic libraries hold what the real ones do where it is read (torch 2.14.1's cu130 wheel, read live:
libtorch_python.so's NUL-terminated arch flags, libtorch_cuda.so's fatbinary containers after ~78 MB of host
code); the host_config.h lines are nvidia-cuda-crt 13.0.88's own, the few around its GNU version check.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import struct
import zipfile
from collections.abc import Mapping
from functools import cache

import pytest

from tests.helpers import ROOT
from wfbuild.cuda import fatbin
from wheelfoundry.catalog.catalog import CudaToolkit
from wheelfoundry.catalog.remote_wheel import RangeError, RemoteWheel
from wheelfoundry.toolkits import toolkit_facts
from wheelfoundry.toolkits.fatbin_headers import ContainerStream
from wheelfoundry.toolkits.toolkit_facts import ToolkitFactsError

DEVICE_CODE = ROOT / "tests" / "fixtures" / "device_code"
HOST_CONFIG = b"""#endif /* __powerpc__ */

#if defined(__GNUC__)

#if __GNUC__ > 15

#error -- unsupported GNU version! gcc versions later than 15 are not supported! The nvcc flag '-allow-unsupported-compiler' can be used to override this version check; however, using an unsupported host compiler may cause compilation failure or incorrect run time execution. Use at your own risk.

#endif /* __GNUC__ > 15 */
"""
TORCH_SASS = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")
FILES = "https://files.example/packages"
TORCH_WHEEL = "torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl"
CRT_WHEEL = "nvidia_cuda_crt-13.2.86-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"


def noise(size: int, seed: int = 0) -> bytes:
    """Incompressible bytes (host code stands in): the wheel's compressed member is as large as the library."""
    return random.Random(seed).randbytes(size)


def container(codes: list[str]) -> bytes:
    """One fatbinary container (header layout: wfbuild/cuda/fatbin.py) with an entry per code and a small payload."""
    entries = b""
    for code in codes:
        kind, number = code.split("_")
        variant = number[-1] if number[-1] in "af" else ""
        arch = int(number.rstrip("af"))
        head = bytearray(64)
        struct.pack_into("<HHIQ", head, 0, 2 if kind == "sm" else 1, 0, 64, 32)
        struct.pack_into("<HHI", head, 24, 0, 9, arch)
        struct.pack_into("<Q", head, 40, {"": 0, "a": 0x100000, "f": 0x200000}[variant])
        entries += bytes(head) + b"\x5a" * 32
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(entries)) + entries


def wheel(members: Mapping[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


@cache
def _files(ptx: bool, device_sass: tuple[str, ...]) -> dict[str, bytes]:
    """The wheels (built once per variant: deflating the noise is the slow part)."""
    flags = [*TORCH_SASS, "compute_120"] if ptx else list(TORCH_SASS)
    units = [[*device_sass, "compute_120"] if ptx else list(device_sass)] * 8
    libtorch_cuda = noise(3 << 20) + container(["sm_90a"]) + b"".join(map(container, units)) + noise(8 << 20, 1)
    metadata = (
        "Metadata-Version: 2.1\nName: torch\nVersion: 2.15.0\n"
        'Requires-Dist: cuda-toolkit[cublas,cudart]==13.2.2; platform_system == "Linux"\n'
        'Requires-Dist: nvidia-cudnn-cu13==9.26.0.51; platform_system == "Linux"\n\n'
    )
    torch = {
        "torch-2.15.0.dist-info/METADATA": metadata.encode(),
        "torch/lib/libtorch_python.so": noise(2 << 20, 2) + b"\0" + " ".join(flags).encode() + b"\0" + noise(9),
        "torch/lib/libtorch_cuda.so": libtorch_cuda,
    }
    crt = {"nvidia/cu13/include/crt/host_config.h": HOST_CONFIG, "nvidia/cu13/include/crt/other.h": b"//"}
    files = {f"{FILES}/{TORCH_WHEEL}": wheel(torch), f"{FILES}/{CRT_WHEEL}": wheel(crt)}
    files[f"{FILES}/cuda_toolkit-13.2.2-py3-none-any.whl.metadata"] = (
        b'Metadata-Version: 2.1\nName: cuda-toolkit\nVersion: 13.2.2\nRequires-Dist: nvidia-cuda-crt==13.2.86.*; extra == "crt"\n\n'
    )
    return files


class Index:
    """PyPI's simple API (PEP 691 JSON with PEP 700 sizes) and its file host, Range honoured."""

    def __init__(self, ptx: bool = False, device_sass: tuple[str, ...] = TORCH_SASS) -> None:
        self.files = dict(_files(ptx, device_sass))
        self.pages = {
            "torch": [self.entry(TORCH_WHEEL)],
            "nvidia-cuda-crt": [self.entry(CRT_WHEEL)],
            "cuda-toolkit": [
                {"filename": "cuda_toolkit-13.2.2-py3-none-any.whl", "url": f"{FILES}/cuda_toolkit-13.2.2-py3-none-any.whl",
                 "hashes": {"sha256": "0" * 64}, "core-metadata": True},
            ],
        }  # fmt: skip
        self.fetched = 0
        self.whole: list[str] = []

    def entry(self, filename: str) -> dict[str, object]:
        body = self.files[f"{FILES}/{filename}"]
        return {"filename": filename, "url": f"{FILES}/{filename}", "size": len(body),
                "hashes": {"sha256": hashlib.sha256(body).hexdigest()}}  # fmt: skip

    def get(self, url: str, headers: Mapping[str, str]) -> bytes:
        if url.startswith("https://pypi.org/simple/"):
            return json.dumps({"files": self.pages[url.rstrip("/").rsplit("/", 1)[1]]}).encode()
        body = self.files[url]
        if "Range" not in headers:
            self.whole.append(url)
            return body
        start, end = (int(n) for n in headers["Range"].removeprefix("bytes=").split("-"))
        self.fetched += end + 1 - start
        return body[start : end + 1]


ROWS = {"13.0": CudaToolkit("13.0", ("7.5", "8.0", "8.7", "11.0"), "7.5;12.0", (), env={"USE_CUFILE": "1"})}


def test_each_fact_is_read_from_its_file_by_range_and_cites_the_file() -> None:
    index = Index()
    facts = toolkit_facts.derive(index.get, "13.2", "2.15.0", ROWS)
    assert facts.default_arch_list == "7.5;8.0;8.6;9.0;10.0;12.0"  # sm_90a (one file's own kernels) left out
    assert facts.gcc_max == 15 and facts.toolkit == "13.2.2"
    assert facts.requirements == ("cuda-toolkit[cublas,cudart]==13.2.2", "nvidia-cudnn-cu13==9.26.0.51")
    arch, gcc = facts.sources["default_arch_list"], facts.sources["gcc_max"]
    assert isinstance(arch, toolkit_facts.Source) and isinstance(gcc, toolkit_facts.Source)
    assert (arch.url, arch.member) == (f"{FILES}/{TORCH_WHEEL}", "torch/lib/libtorch_cuda.so")
    assert arch.sha256 == index.entry(TORCH_WHEEL)["hashes"]["sha256"]  # type: ignore[index]
    assert "agrees with torch/lib/libtorch_python.so" in arch.detail
    assert (gcc.url, gcc.member) == (f"{FILES}/{CRT_WHEEL}", "nvidia/cu13/include/crt/host_config.h")
    assert "unchecked" in str(gcc) and "#if __GNUC__ > 15" in str(gcc)
    # archs and env: derived from the newest older row of the same major, and each source says so
    assert facts.archs == ("7.5", "8.0", "8.6", "8.7", "9.0", "10.0", "11.0", "12.0")
    assert facts.env == {"USE_CUFILE": "1"} and "13.0" in str(facts.sources["env"])
    assert facts.row().default_arch_list == facts.default_arch_list and facts.row().gcc_max == 15
    # nothing was downloaded whole, and most of libtorch_cuda.so's 8 MiB after its containers (read-ahead: at most 4 MiB)
    assert index.whole == [f"{FILES}/cuda_toolkit-13.2.2-py3-none-any.whl.metadata"]
    assert facts.fetched == index.fetched < len(index.files[f"{FILES}/{TORCH_WHEEL}"]) - (3 << 20)


def test_ptx_in_the_device_code_and_the_flags_becomes_plus_ptx() -> None:
    facts = toolkit_facts.derive(Index(ptx=True).get, "13.2", "2.15.0", ROWS)
    assert facts.default_arch_list == "7.5;8.0;8.6;9.0;10.0;12.0+PTX"


def test_device_code_that_disagrees_with_the_arch_flags_is_an_error_naming_both() -> None:
    index = Index(device_sass=TORCH_SASS[1:])
    with pytest.raises(ToolkitFactsError, match=r"libtorch_cuda.so's device code says 8\.0;.*libtorch_python.so"):
        toolkit_facts.derive(index.get, "13.2", "2.15.0", ROWS)
    assert toolkit_facts.derive(index.get, "13.2", "2.15.0", ROWS, device_code=False).default_arch_list.startswith(
        "7.5;"
    )


def test_a_torch_wheel_of_another_cuda_is_refused_naming_its_metadata() -> None:
    with pytest.raises(ToolkitFactsError, match=r"METADATA: no cuda-toolkit==13\.0\.\* .* not a CUDA 13\.0 build"):
        toolkit_facts.derive(Index().get, "13.0", "2.15.0", ROWS)


def test_a_get_that_ignores_range_is_refused_not_read_on() -> None:
    index = Index()

    def whole(url: str, headers: Mapping[str, str]) -> bytes:
        return index.files[url] if url.startswith(FILES) else index.get(url, headers)

    with pytest.raises(RangeError, match=r"does not honour Range"):
        toolkit_facts.derive(whole, "13.2", "2.15.0", ROWS)
    body = index.files[f"{FILES}/{TORCH_WHEEL}"]
    with pytest.raises(RangeError, match=r"asked for bytes \d+-\d+ \(\d+ bytes\)"):
        RemoteWheel(lambda url, headers: body[:10], f"{FILES}/{TORCH_WHEEL}", len(body))


def test_remote_wheel_lists_and_reads_members_like_zipfile_with_few_requests() -> None:
    body = wheel({"a/x.txt": b"x" * 100_000, "a/y.bin": noise(700_000)})
    index = Index()
    index.files["https://h/w.whl"] = body
    remote = RemoteWheel(index.get, "https://h/w.whl", len(body), block=1 << 16)
    local = zipfile.ZipFile(io.BytesIO(body))
    assert [(m.name, m.size) for m in remote.members()] == [(i.filename, i.file_size) for i in local.infolist()]
    assert remote.read("a/y.bin") == local.read("a/y.bin") and remote.read("a/x.txt") == b"x" * 100_000
    assert remote.file.requests <= 6  # the tail, then y.bin's run of blocks (read ahead), x.txt already cached
    with pytest.raises(KeyError, match=r"w\.whl: no member a/z"):
        remote.read("a/z")


@pytest.mark.parametrize(
    ("name", "section"), [("kernel.fatbin", None), ("libmulti.so", ".nv_fatbin"), ("librdc.so", ".nv_fatbin")]
)
def test_the_stream_reader_gives_the_runners_answers_on_the_same_bytes(name: str, section: str | None) -> None:
    data = (DEVICE_CODE / name).read_bytes()
    start, end = 0, len(data)
    if section:
        (found,) = [s for s in fatbin.elf_sections(data) or [] if s.name == section]
        start, end = found.offset, found.offset + found.size
    expected = [e.code.name for e in fatbin.scan(data, start, end)]
    reader, names = ContainerStream(), []
    for at in range(start, end, 97):  # fed in pieces that cut headers and magics apart
        for codes in reader.feed(data[at : min(at + 97, end)]):
            names += codes
    assert names == expected and expected


def test_arch_list_spelling_and_the_gnu_check() -> None:
    assert toolkit_facts.arch_list(["sm_90a", "sm_80", "compute_90", "sm_100f", "sm_90"]) == "8.0;9.0+PTX"
    assert toolkit_facts.gcc_max(HOST_CONFIG.decode()) == 15
    with pytest.raises(ToolkitFactsError, match=r"w.whl:crt/host_config.h: expected one '#if __GNUC__ > N'"):
        toolkit_facts.gcc_max("#if __GNUC__ > 15\n#endif\n", "w.whl:crt/host_config.h")
    with pytest.raises(ToolkitFactsError, match="no plain sm_XY"):
        toolkit_facts.arch_list(["sm_90a"])


def test_the_reader_gives_toolkit_row_facts_with_their_sources() -> None:
    found = toolkit_facts.reader(Index().get, ROWS)("13.2", "x86_64", "2.15.0")
    assert (found.default_arch_list, found.gcc_max, found.env) == ("7.5;8.0;8.6;9.0;10.0;12.0", 15, {"USE_CUFILE": "1"})
    assert "host_config.h" in found.sources["gcc_max"] and "libtorch_cuda.so" in found.sources["default_arch_list"]
