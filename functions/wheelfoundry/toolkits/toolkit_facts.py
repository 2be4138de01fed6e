"""Derive a toolkit's catalog facts from upstream files on the index, each with where it was read.

For CUDA ``X.Y`` and a torch release whose wheel on the index was built with it (its METADATA pins say so):

- ``default_arch_list``: the device code of torch's own CUDA library, ``torch/lib/libtorch_cuda.so``: the
  SASS (``sm_XY``) and PTX (``compute_XY``) of the first fatbinary containers of its ``.nv_fatbin``, inflated
  as a stream and abandoned there (~22 MB of a 356 MB member for torch 2.14). The smaller libraries do not
  carry the list: libc10_cuda.so and libcaffe2_nvrtc.so hold no device code, libtorch_cuda_linalg.so holds
  MAGMA's (8.0-12.0, no 7.5), libtorch_nvshmem.so is device-linked (SASS only, never PTX) with NVSHMEM's own
  relocatable objects beside torch's. Cross-checked with the arch flags torch compiles into
  ``libtorch_python.so`` (what ``torch.cuda.get_arch_list()`` returns: ``sm_75 ... sm_120``, plus
  ``compute_XY`` for ``+PTX``), streamed until found (~6 MB); the two must agree.
- ``gcc_max``: ``crt/host_config.h`` of the locked compiler (``nvidia-cuda-crt`` for 13+, ``nvidia-cuda-nvcc-cu12``
  for 12.x): the ``#if __GNUC__ > N`` that guards ``#error -- unsupported GNU version``.
- ``toolkit``, ``requirements``: the torch wheel's pins (its ``cuda-toolkit==X.Y.Z``; else the newest X.Y.*).
- ``archs`` (what nvcc can target) is NOT read: the exact source is ``nvcc --list-gpu-arch``, which needs
  nvcc run. It is the union of the derived list's capabilities and the newest older row of the same major.
  (``nvcc``'s own strings hold ``compute_XY`` names: 13.0's add 8.8 to the catalog's 13.0 row, so they are not
  taken as the list without running it.)
- ``env``: the newest older row of the same major's, copied: build switches are a framework-build matter
  (build_cuda.sh), which extension builds never read.

Reads are HTTP Range reads of the wheels (:mod:`wheelfoundry.catalog.remote_wheel`): a wheel's sha256 cannot be
checked on a partial read, so each :class:`Source` records the sha256 the index lists for the file the fact
was read from, unchecked. ``get(url, headers)`` is the only I/O, as in :mod:`wheelfoundry.toolkits.toolkit_lock`.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from packaging.version import Version

from wheelfoundry.catalog.catalog import CudaToolkit
from wheelfoundry.catalog.remote_wheel import Get, RemoteWheel
from wheelfoundry.toolkits.fatbin_headers import ContainerStream
from wheelfoundry.toolkits.toolkit_lock import (
    METAPACKAGE,
    SimpleIndex,
    ToolkitLockError,
    expand,
    metapackage_pins,
    pick_file,
    pick_release,
    torch_lines,
)
from wheelfoundry.toolkits.toolkit_row import Facts, FactsOf

DEVICE_LIBRARY = "torch/lib/libtorch_cuda.so"
FLAGS_LIBRARY = "torch/lib/libtorch_python.so"
CONTAINERS = 8  # containers read from DEVICE_LIBRARY: one translation unit writes one or two
CHUNK = 1 << 20
# torch's arch flags: a NUL-terminated run of two or more sm_/compute_ names (one alone is too common a word).
_CODE = rb"(?:sm|compute)_\d{2,3}[af]?"
ARCH_FLAGS = re.compile(rb"\x00(" + _CODE + rb"(?: " + _CODE + rb")+)\x00")
GNU_CHECK = re.compile(r"#if\s+__GNUC__\s*>\s*(\d+)\s*\n\s*#error -- unsupported GNU version")
T = TypeVar("T")


class ToolkitFactsError(ValueError):
    """A fact could not be read: names the file read and what was expected in it."""


@dataclass(frozen=True)
class Source:
    """Where a fact was read: a wheel (its index sha256, unchecked: a Range read never sees the whole file)."""

    url: str
    member: str
    sha256: str
    detail: str = ""

    def __str__(self) -> str:
        name = self.url.rsplit("/", 1)[-1].split("#", 1)[0]
        note = f": {self.detail}" if self.detail else ""
        return f"{name}:{self.member} (index sha256 {self.sha256[:12]}..., unchecked: range read){note}"


@dataclass(frozen=True)
class ToolkitFacts:
    cuda: str
    torch: str
    default_arch_list: str
    archs: tuple[str, ...]
    toolkit: str
    gcc_max: int
    requirements: tuple[str, ...]
    env: Mapping[str, str]
    sources: Mapping[str, Source | str]  # fact -> where it was read (a str: derived, and from what)
    fetched: int = 0  # bytes received from the index's file host
    requests: int = 0

    def source_texts(self) -> dict[str, str]:
        """Each fact's source as text (what toolkit_row.Facts.sources holds)."""
        return {fact: str(source) for fact, source in self.sources.items()}

    def row(self) -> CudaToolkit:
        return CudaToolkit(
            self.cuda, self.archs, self.default_arch_list, self.requirements, self.toolkit, self.gcc_max,
            env=dict(self.env),
        )  # fmt: skip


def arch_list(codes: Iterable[str]) -> str:
    """``sm_75 sm_120 compute_120`` -> ``7.5;12.0+PTX``; arch- and family-specific code (``sm_90a``) is left out:
    it is what single files add for their own kernels, not the list every file is compiled for."""
    sass: set[int] = set()
    ptx: set[int] = set()
    for code in codes:
        match = re.fullmatch(r"(sm|compute)_(\d{2,3})([af]?)", code)
        if not match:
            raise ToolkitFactsError(f"{code!r}: not an sm_XY or compute_XY code name")
        if not match[3]:
            (sass if match[1] == "sm" else ptx).add(int(match[2]))
    if not sass | ptx:
        raise ToolkitFactsError(f"{sorted(codes)}: no plain sm_XY or compute_XY code among them")
    return ";".join(f"{n // 10}.{n % 10}{'+PTX' if n in ptx else ''}" for n in sorted(sass | ptx))


def gcc_max(header: str, where: str = "crt/host_config.h") -> int:
    """N of the ``#if __GNUC__ > N`` / ``#error -- unsupported GNU version`` check."""
    found = {int(m[1]) for m in GNU_CHECK.finditer(header)}
    if len(found) != 1:
        raise ToolkitFactsError(
            f"{where}: expected one '#if __GNUC__ > N' followed by '#error -- unsupported GNU version', "
            f"found {sorted(found) or 'none'}"
        )
    return found.pop()


def _stream(wheel: RemoteWheel, member: str, step: Callable[[bytes], T | None], what: str) -> T:
    """Inflate ``member`` chunk by chunk until ``step`` returns a value; only what was inflated is fetched."""
    with wheel.open(member) as stream:
        while chunk := stream.read(CHUNK):
            if (value := step(chunk)) is not None:
                return value
    raise ToolkitFactsError(f"{wheel.filename}:{member}: read to its end, found no {what}")


def device_codes(wheel: RemoteWheel, member: str = DEVICE_LIBRARY, containers: int = CONTAINERS) -> list[str]:
    """The code names of the first ``containers`` fatbinary containers of ``member``."""
    reader, seen = ContainerStream(), []

    def step(chunk: bytes) -> list[str] | None:
        seen.extend(reader.feed(chunk))
        return sorted({c for names in seen[:containers] for c in names}) if len(seen) >= containers else None

    return _stream(wheel, member, step, f"{containers} fatbinary containers")


def arch_flags(wheel: RemoteWheel, member: str = FLAGS_LIBRARY) -> list[str]:
    """torch's arch flags string (``torch.cuda.get_arch_list()``) in ``member``, split."""
    tail = b""

    def step(chunk: bytes) -> list[str] | None:
        nonlocal tail
        window, tail = tail + chunk, (tail + chunk)[-256:]  # the string may straddle two chunks
        match = ARCH_FLAGS.search(window)
        return match[1].decode().split() if match else None

    return _stream(wheel, member, step, "arch flags string (NUL-terminated 'sm_XY sm_XY ...')")


def _file(index: SimpleIndex, name: str, filename: str) -> Mapping[str, Any]:
    return next(f for f in index.files(name) if f["filename"] == filename)


def _open(get: Get, file: Mapping[str, Any]) -> RemoteWheel:
    if not file.get("size"):
        raise ToolkitFactsError(f"{file['filename']}: the index lists no size (PEP 700); a range read needs one")
    try:
        return RemoteWheel(get, file["url"], int(file["size"]), file["hashes"]["sha256"])
    except zipfile.BadZipFile as exc:
        raise ToolkitFactsError(f"{file['filename']}: not a readable wheel ({exc})") from exc


def torch_wheel(index: SimpleIndex, torch: str, platform: str = "x86_64") -> Mapping[str, Any]:
    """The index's Linux ``platform`` wheel of torch ``torch``: one with the GIL, the last by tag (every tag's
    CUDA libraries are built with the same flags)."""
    files = sorted(
        (f for f in index.files("torch")
         if f["filename"].startswith(f"torch-{torch}-") and f["filename"].endswith(f"_{platform}.whl")
         and "manylinux" in f["filename"] and not f.get("yanked")),
        key=lambda f: (not f["filename"].split("-")[-2].endswith("t"), f["filename"].split("-")[-2]),
    )  # fmt: skip
    if not files:
        raise ToolkitFactsError(f"torch {torch}: the index has no manylinux {platform} wheel of it")
    return files[-1]


def _older(rows: Mapping[str, CudaToolkit], cuda: str) -> CudaToolkit | None:
    same = [v for v in rows if Version(v).major == Version(cuda).major and Version(v) < Version(cuda)]
    return rows[max(same, key=Version)] if same else None


def _compiler(index: SimpleIndex, cuda: str, pins: list[str], platform: str) -> tuple[str, Mapping[str, Any], str]:
    """The toolkit release, and the wheel holding its ``crt/host_config.h`` (with the member's folder)."""
    if Version(cuda).major >= 13:
        release = pick_release(cuda, index.files(METAPACKAGE), pins)
        wheels, why = expand(index, f"{METAPACKAGE}[crt]=={release}", platform)
        crt = [w for w in wheels if w.name == "nvidia-cuda-crt"]
        if why or not crt:
            raise ToolkitFactsError(f"{METAPACKAGE}[crt]=={release}: no nvidia-cuda-crt wheel ({why or wheels})")
        return release, _file(index, crt[0].name, crt[0].file), crt[0].name
    name = f"nvidia-cuda-nvcc-cu{Version(cuda).major}"  # 12.x: the crt headers ship inside nvcc's wheel
    nvcc = pick_file(index.files(name), name, f"=={cuda}.*", platform)
    if nvcc is None:
        raise ToolkitFactsError(f"{name}=={cuda}.*: no manylinux {platform} wheel on the index")
    try:
        release = pick_release(cuda, index.files(METAPACKAGE), pins)
    except ToolkitLockError:
        release = nvcc.version  # no metapackage release for this CUDA: the compiler's own version
    return release, _file(index, name, nvcc.file), name


def derive(
    get: Get,
    cuda: str,
    torch: str,
    rows: Mapping[str, CudaToolkit] | None = None,
    index: SimpleIndex | None = None,
    device_code: bool = True,
    platform: str = "x86_64",
) -> ToolkitFacts:
    """CUDA ``cuda``'s facts, read from the index's wheel of torch ``torch`` and the toolkit it pins.

    ``rows``: the catalog's toolkit rows, for ``archs`` and ``env`` (the newest older row of the same major).
    ``device_code``: also read ``libtorch_cuda.so``'s device code (~22 MB for torch 2.14) and require it to
    agree with the arch flags string; False reads the string only.
    """
    index = index or SimpleIndex(get)
    file = _open(get, torch_wheel(index, torch, platform))
    wheels = [file]
    meta_name = next((n.name for n in file.members() if n.name.endswith(".dist-info/METADATA")), None)
    if meta_name is None:
        raise ToolkitFactsError(f"{file.filename}: no .dist-info/METADATA member")
    lines = torch_lines(file.read(meta_name).decode(), cuda)
    if not lines:
        raise ToolkitFactsError(
            f"{file.filename}:{meta_name}: no cuda-toolkit=={cuda}.* or nvidia-cuda-runtime*=={cuda}.* pin; "
            f"torch {torch} on this index is not a CUDA {cuda} build"
        )
    sources: dict[str, Source | str] = {"requirements": Source(file.url, meta_name, file.sha256, "Requires-Dist")}
    flags = arch_flags(file)
    from_flags = arch_list(flags)
    sources["default_arch_list"] = Source(file.url, FLAGS_LIBRARY, file.sha256, f"arch flags {' '.join(flags)!r}")
    if device_code:
        codes = device_codes(file)
        from_code = arch_list(codes)
        if from_code != from_flags:
            raise ToolkitFactsError(
                f"{file.filename}: {DEVICE_LIBRARY}'s device code says {from_code} ({' '.join(codes)}), "
                f"{FLAGS_LIBRARY}'s arch flags say {from_flags}; expected the same list"
            )
        detail = f"first {CONTAINERS} fatbinary containers: {' '.join(codes)}; agrees with {FLAGS_LIBRARY}"
        sources["default_arch_list"] = Source(file.url, DEVICE_LIBRARY, file.sha256, detail)
    release, crt_file, crt_name = _compiler(index, cuda, metapackage_pins(lines), platform)
    crt = _open(get, crt_file)
    wheels.append(crt)
    header = next((m.name for m in crt.members() if m.name.endswith("/crt/host_config.h")), None)
    if header is None:
        raise ToolkitFactsError(f"{crt.filename}: no crt/host_config.h member; expected {crt_name} to ship nvcc's")
    gcc = gcc_max(crt.read(header).decode(errors="replace"), f"{crt.filename}:{header}")
    sources["gcc_max"] = Source(crt.url, header, crt.sha256, f"#if __GNUC__ > {gcc}")
    sources["toolkit"] = f"{METAPACKAGE}=={release} (the torch wheel's pin, else the newest {cuda}.x)"
    older = _older(rows or {}, cuda)
    capabilities = {a.removesuffix("+PTX") for a in from_flags.split(";")} | set(older.archs if older else ())
    sources["archs"] = (
        f"derived, not read: the default list's capabilities and CUDA {older.version if older else '(none)'}'s "
        "archs; exact: nvcc --list-gpu-arch"
    )
    sources["env"] = f"copied from CUDA {older.version if older else '(none)'}: build switches, unused by extensions"
    return ToolkitFacts(
        cuda=cuda,
        torch=torch,
        default_arch_list=from_flags,
        archs=tuple(sorted(capabilities, key=Version)),
        toolkit=release,
        gcc_max=gcc,
        requirements=tuple(lines),
        env=dict(older.env) if older else {},
        sources=sources,
        fetched=sum(w.file.fetched for w in wheels),
        requests=sum(w.file.requests for w in wheels),
    )


def reader(get: Get, rows: Mapping[str, CudaToolkit], index: SimpleIndex | None = None) -> FactsOf:
    """``facts(cuda, platform, torch_version)`` for toolkit_row (what the watcher injects), read by :func:`derive`."""

    def facts(cuda: str, platform: str, torch: str) -> Facts:
        found = derive(get, cuda, torch, rows, index, platform=platform)
        return Facts(found.archs, found.default_arch_list, found.gcc_max, dict(found.env), found.source_texts())

    return facts
