"""The device code a compiled file holds, read from its bytes: no CUDA toolkit, standard library only.

nvcc embeds the GPU code of a host object or shared library as a *fatbinary* in the ELF section
``.nv_fatbin`` (the device-linked image with ``-rdc``/``nvcc -dlink`` lands there too; the relocatable
copies in ``__nv_relfatbin`` are link inputs the runtime never loads, so they are not read). A fatbinary
is a run of containers; each is a 16-byte header (magic 0xBA55ED50, version 1, header size, size of what
follows) and entries, each a header of at least 64 bytes followed by its payload:

    offset  0 u16 kind (1 PTX, 2 ELF = SASS)    4 u32 header size    8 u64 payload size
           16 u32 compressed size               24 u16 minor, 26 u16 major (PTX: the PTX ISA version)
           28 u32 arch (90 = sm_90/compute_90) 40 u64 flags

Flags seen from CUDA 13.0's nvcc (and cross-checked with cuobjdump in tests/buildspecs/test_device_code.py):
0x100000 arch-specific ('a': sm_90a, compute_90a), 0x200000 family-specific ('f': sm_100f), 0x2000 / 0x8000 a
compressed payload (LZ4, zstd). The layout is NVIDIA's fatbinary.h (``fatBinaryHeader``, FATBIN_MAGIC) as
published in reverse-engineering notes, e.g. n-eiling/cuda-fatbin-decompression@9b194a9a:fatbin-decompress.h.
Only headers are read, so compressed payloads need no decompressor.

Besides ELF objects, a wheel may ship device code as data: a standalone fatbinary (``*.fatbin``), a cubin
(an ELF of machine EM_CUDA, 190) or PTX text. Fatbinaries embedded in ``.rodata``/``.data`` (bin2c,
``.incbin``) are found by their magic; a bare cubin embedded as data is not.
"""

from __future__ import annotations

import mmap
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from wfbuild.cuda.archrule import Code

MAGIC = 0xBA55ED50
MAGIC_BYTES = struct.pack("<I", MAGIC)
KIND_PTX, KIND_ELF = 1, 2
FLAG_ARCH_SPECIFIC, FLAG_FAMILY, FLAGS_COMPRESSED = 0x100000, 0x200000, 0x2000 | 0x8000
ENTRY_MIN = 64
FATBIN_SECTIONS = (".nv_fatbin",)
DATA_SECTIONS = (".rodata", ".data.rel.ro", ".data", ".lrodata", ".ldata")  # where bin2c's arrays land
EM_CUDA = 190
PTX_VERSION = re.compile(rb"^\s*\.version\s+(\d+)\.(\d+)", re.MULTILINE)
PTX_TARGET = re.compile(rb"^\s*\.target\s+sm_(\d{2,3})([af]?)", re.MULTILINE)


@dataclass(frozen=True, order=True)
class Entry:
    """One fatbinary entry: its code, and for PTX the PTX ISA version (``9.0``)."""

    code: Code
    isa: str = ""
    compressed: bool = False


def _code(kind: str, arch: int, flags: int) -> Code:
    variant = "a" if flags & FLAG_ARCH_SPECIFIC else ("f" if flags & FLAG_FAMILY else "")
    return Code(kind, arch // 10, arch % 10, variant)


def container(data: bytes | mmap.mmap, at: int, end: int) -> tuple[list[Entry], int] | None:
    """The entries of the container at ``at`` and where it ends, or None if no well-formed container is there."""
    if at + 16 > end:
        return None
    magic, version, header, size = struct.unpack_from("<IHHQ", data, at)
    stop = at + header + size
    if magic != MAGIC or version != 1 or header < 16 or stop > end:
        return None
    entries, pos = [], at + header
    while pos < stop:
        if pos + ENTRY_MIN > stop:
            return None
        kind, _, head, payload = struct.unpack_from("<HHIQ", data, pos)
        minor, major, arch = struct.unpack_from("<HHI", data, pos + 24)
        (flags,) = struct.unpack_from("<Q", data, pos + 40)
        if head < ENTRY_MIN or pos + head + payload > stop:
            return None
        compressed = bool(flags & FLAGS_COMPRESSED)
        if kind == KIND_ELF:
            entries.append(Entry(_code("sass", arch, flags), "", compressed))
        elif kind == KIND_PTX:
            entries.append(Entry(_code("ptx", arch, flags), f"{major}.{minor}", compressed))
        pos += head + payload  # other kinds (LTO IR, ...) hold nothing a GPU runs as it is
    return entries, stop


def scan(data: bytes | mmap.mmap, start: int, end: int) -> list[Entry]:
    """Every well-formed container between ``start`` and ``end`` (padding between them is skipped)."""
    found: list[Entry] = []
    pos = start
    while True:
        pos = data.find(MAGIC_BYTES, pos, end)
        if pos < 0:
            return found
        parsed = container(data, pos, end)
        if parsed is None:
            pos += 4
            continue
        found += parsed[0]
        pos = parsed[1]


@dataclass(frozen=True)
class Section:
    name: str
    offset: int
    size: int
    nobits: bool


def elf_sections(data: bytes | mmap.mmap) -> list[Section] | None:
    """The section headers of a little-endian ELF file, or None if it is not one this reader knows."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[5] != 1:
        return None
    wide = data[4] == 2
    if wide:
        (shoff,) = struct.unpack_from("<Q", data, 0x28)
        entsize, count, names = struct.unpack_from("<HHH", data, 0x3A)
        layout, fields = "<IIQQQQIIQQ", (0, 1, 4, 5)
    else:
        (shoff,) = struct.unpack_from("<I", data, 0x20)
        entsize, count, names = struct.unpack_from("<HHH", data, 0x2E)
        layout, fields = "<IIIIIIIIII", (0, 1, 4, 5)
    if shoff == 0 or shoff + entsize > len(data) or entsize < struct.calcsize(layout):
        return []
    first = struct.unpack_from(layout, data, shoff)
    count = count or first[5]  # more than 0xff00 sections: the count is in section 0's sh_size
    names = first[7] if names == 0xFFFF else names  # ... and the names' index in its sh_link
    raw = []
    for i in range(count):
        if shoff + (i + 1) * entsize > len(data):
            return None
        values = struct.unpack_from(layout, data, shoff + i * entsize)
        raw.append(tuple(values[f] for f in fields))  # name, type, offset, size
    if names >= len(raw):
        return None
    table_at, table_size = raw[names][2], raw[names][3]
    out = []
    for name_at, kind, offset, size in raw:
        end = data.find(b"\0", table_at + name_at, table_at + table_size)
        name = bytes(data[table_at + name_at : end]).decode("ascii", "replace") if end >= 0 else ""
        out.append(Section(name, offset, size, kind == 8))  # SHT_NOBITS: no bytes in the file
    return out


def _cubin_code(data: bytes | mmap.mmap) -> Code | None:
    """A standalone cubin's sm, from e_flags. ELF ABI version 7 (ptxas up to CUDA 12.x): the sm in bits 0-7,
    0x800 for 'a'; version 8 (CUDA 13's): the sm in bits 8-15, and no 'a' there (read as the plain sm)."""
    (machine,) = struct.unpack_from("<H", data, 18)
    if machine != EM_CUDA:
        return None
    (flags,) = struct.unpack_from("<I", data, 0x30 if data[4] == 2 else 0x24)
    modern = data[8] >= 8
    arch = (flags >> 8) & 0xFF if modern else flags & 0xFF
    variant = "a" if not modern and flags & 0x800 else ""
    return Code("sass", arch // 10, arch % 10, variant) if arch else None


def read_ptx(text: bytes) -> list[Entry]:
    version, target = PTX_VERSION.search(text), PTX_TARGET.search(text)
    if not (version and target):
        return []
    arch = int(target[1])
    return [Entry(Code("ptx", arch // 10, arch % 10, target[2].decode()), f"{int(version[1])}.{int(version[2])}")]


def read(data: bytes | mmap.mmap, name: str = "") -> list[Entry] | None:
    """The device code of one file's bytes; None when the file is not compiled code at all (a .py, a .json)."""
    sections = elf_sections(data)
    if sections is not None:
        cubin = _cubin_code(data)
        if cubin is not None:
            return [Entry(cubin)]
        found: list[Entry] = []
        for section in sections:
            wanted = section.name in FATBIN_SECTIONS or section.name in DATA_SECTIONS
            if wanted and not section.nobits and section.offset + section.size <= len(data):
                found += scan(data, section.offset, section.offset + section.size)
        return found
    if data[:4] == MAGIC_BYTES:
        return scan(data, 0, len(data))
    if name.endswith(".ptx"):
        return read_ptx(bytes(data[: 1 << 20]))
    return None


def read_path(path: Path) -> list[Entry] | None:
    with path.open("rb") as handle:
        if path.stat().st_size == 0:
            return None
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return read(data, path.name)


SKIP = (".py", ".pyi", ".pyc", ".txt", ".json", ".md", ".rst", ".toml", ".cfg", ".h", ".cuh", ".cu", ".cpp")


def worth_opening(name: str) -> bool:
    """An archive member that may be compiled code: not a Python source, a header, metadata or the like."""
    return not name.endswith("/") and not name.endswith(SKIP) and not name.endswith(("/RECORD", "/METADATA", "/WHEEL"))
