"""Fatbinary container headers read from a stream of bytes (a shared library inflated piece by piece).

A copy of the container reader of buildspecs/wfbuild/cuda/fatbin.py, which the Lambda package cannot import
(the runner bundle and the Lambda package import nothing of each other). The layout and the flags are
documented there; tests/test_toolkit_facts.py holds both readers to the same answers on the same bytes.

The difference: this one sees no ELF section table (it is at the end of a file only part of which is
read), so it takes every well-formed container the stream holds, whatever section it lies in.
"""

from __future__ import annotations

import struct

MAGIC = 0xBA55ED50
MAGIC_BYTES = struct.pack("<I", MAGIC)
KIND_PTX, KIND_ELF = 1, 2
FLAG_ARCH_SPECIFIC, FLAG_FAMILY = 0x100000, 0x200000
ENTRY_MIN = 64
# One translation unit's container: torch's largest seen are ~2 MiB. A bogus magic claiming more is skipped
# rather than buffered up to its claimed size.
MAX_CONTAINER = 64 << 20


def _name(kind: int, arch: int, flags: int) -> str:
    variant = "a" if flags & FLAG_ARCH_SPECIFIC else ("f" if flags & FLAG_FAMILY else "")
    return f"{'sm' if kind == KIND_ELF else 'compute'}_{arch}{variant}"


def container(data: bytes | bytearray, at: int, end: int) -> tuple[list[str], int] | None:
    """The code names (``sm_90a``, ``compute_120``) of the container at ``at`` and where it ends, or None."""
    if at + 16 > end:
        return None
    magic, version, header, size = struct.unpack_from("<IHHQ", data, at)
    stop = at + header + size
    if magic != MAGIC or version != 1 or header < 16 or stop > end:
        return None
    names, pos = [], at + header
    while pos < stop:
        if pos + ENTRY_MIN > stop:
            return None
        kind, _, head, payload = struct.unpack_from("<HHIQ", data, pos)
        (arch,) = struct.unpack_from("<I", data, pos + 28)
        (flags,) = struct.unpack_from("<Q", data, pos + 40)
        if head < ENTRY_MIN or pos + head + payload > stop:
            return None
        if kind in (KIND_ELF, KIND_PTX):
            names.append(_name(kind, arch, flags))
        pos += head + payload  # other kinds (LTO IR, ...) hold nothing a GPU runs as it is
    return names, stop


class ContainerStream:
    """Feed bytes in order; get back each container completed so far (its code names)."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.offset = 0  # stream offset of buffer[0]
        self.first_at: int | None = None  # stream offset of the first container found

    def feed(self, chunk: bytes) -> list[list[str]]:
        self.buffer += chunk
        found: list[list[str]] = []
        pos, keep = 0, 0
        while True:
            at = self.buffer.find(MAGIC_BYTES, pos)
            if at < 0:
                keep = max(pos, len(self.buffer) - 3)  # a magic may straddle two chunks
                break
            if at + 16 > len(self.buffer):
                keep = at
                break
            _, version, header, size = struct.unpack_from("<IHHQ", self.buffer, at)
            if version != 1 or header < 16 or size > MAX_CONTAINER:
                pos = at + 4
                continue
            if at + header + size > len(self.buffer):  # wait for the rest of it
                keep = at
                break
            parsed = container(self.buffer, at, at + header + size)
            if parsed is None:
                pos = at + 4
                continue
            if self.first_at is None:
                self.first_at = self.offset + at
            found.append(parsed[0])
            pos = parsed[1]
        del self.buffer[:keep]
        self.offset += keep
        return found
