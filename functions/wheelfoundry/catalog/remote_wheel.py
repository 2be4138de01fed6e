"""Read members of a remote wheel (a zip) through HTTP Range requests, without downloading the wheel.

The stdlib's :mod:`zipfile` does the zip work (End Of Central Directory, zip64, the central directory, a
member's local header, inflating): it is handed :class:`RangeFile`, a seekable read-only file whose bytes
come from ``get(url, {"Range": "bytes=A-B"})`` in aligned blocks, each fetched once. So listing a 500 MB
torch wheel costs its tail (the directory: a few hundred KiB) and reading a member costs its compressed size.

Nothing read this way is verified: a wheel's sha256 covers the whole file, which a partial read never sees.
Callers record the sha256 the index lists for the file next to each fact (the fact is from the file the
index named by that hash) and say that it was not checked.

``get`` is the only I/O (as in :mod:`wheelfoundry.toolkits.toolkit_lock`). An answer to a Range request must be
exactly the bytes asked for: a server (or a ``get``) that ignores Range and answers the whole file is
refused with :class:`RangeError`, never read on, so a broken Range path fails loudly instead of silently
turning every fact into a gigabyte download.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO

Get = Callable[[str, Mapping[str, str]], bytes]
BLOCK = 1 << 18  # 256 KiB: the EOCD search (up to 64 KiB + 22) and small members take one request
# A member streamed from start to end (zipfile reads it in pieces) is fetched ahead in requests that double up
# to this: tens of requests, not hundreds, for a 30 MB read, while a short read stays short.
READ_AHEAD_MAX = 4 << 20


class RangeError(ValueError):
    """A Range request was not answered with exactly the bytes asked for. Not an OSError: zipfile turns those
    into "File is not a zip file", which would hide the cause."""


class RangeFile(io.RawIOBase):
    """``size`` bytes at ``url``, read on demand by Range requests; counts what it fetched."""

    def __init__(self, get: Get, url: str, size: int, block: int = BLOCK) -> None:
        super().__init__()
        if size <= 0:
            raise ValueError(f"{url}: size {size} is not a file size; the index's size of the file is needed")
        self.get, self.url, self.size, self.block = get, url, size, block
        self.position = 0
        self.blocks: dict[int, bytes] = {}
        self.fetched = 0  # bytes received
        self.requests = 0
        self.next_block = -1  # the block after the last one fetched
        self.ahead = 0  # blocks fetched ahead on sequential reads (doubles, up to READ_AHEAD_MAX)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError(f"{self.url}: seek to {base + offset}, before the start")
        self.position = base + offset
        return self.position

    def _fetch(self, first: int, last: int) -> None:
        """Blocks ``first``..``last`` (inclusive) in one request."""
        start, end = first * self.block, min((last + 1) * self.block, self.size)
        body = self.get(self.url, {"Range": f"bytes={start}-{end - 1}"})
        self.requests += 1
        self.fetched += len(body)
        if len(body) != end - start:
            raise RangeError(
                f"{self.url}: asked for bytes {start}-{end - 1} ({end - start} bytes) of {self.size}, got "
                f"{len(body)} bytes; the server or get() does not honour Range (refused, not read on)"
            )
        for i in range(first, last + 1):
            self.blocks[i] = body[(i - first) * self.block : (i - first + 1) * self.block]

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        end = min(self.position + len(buffer), self.size)
        if end <= self.position:
            return 0
        first, last = self.position // self.block, (end - 1) // self.block
        missing = [i for i in range(first, last + 1) if i not in self.blocks]
        if missing and missing[0] == self.next_block:  # reading on from the last fetch: fetch ahead, doubling
            self.ahead = min(max(1, self.ahead * 2), READ_AHEAD_MAX // self.block)
            ahead = range(last + 1, min(last + 1 + self.ahead, -(-self.size // self.block)))
            missing += [i for i in ahead if i not in self.blocks]
        elif missing:  # a jump (the directory, then a member): no read-ahead until reads go on from it
            self.ahead = 0
        while missing:  # each run of missing blocks in one request
            run = 1
            while run < len(missing) and missing[run] == missing[0] + run:
                run += 1
            self._fetch(missing[0], missing[run - 1])
            self.next_block = missing[run - 1] + 1
            missing = missing[run:]
        data = b"".join(self.blocks[i] for i in range(first, last + 1))
        at = self.position - first * self.block
        count = end - self.position
        buffer[:count] = data[at : at + count]
        self.position = end
        return count


@dataclass(frozen=True)
class Member:
    name: str
    size: int  # uncompressed
    compressed: int


class RemoteWheel:
    """A wheel on an index, read by Range: its listing and single members (``zipfile`` over :class:`RangeFile`)."""

    def __init__(self, get: Get, url: str, size: int, sha256: str = "", block: int = BLOCK) -> None:
        self.url, self.sha256 = url, sha256
        self.file = RangeFile(get, url, size, block)
        try:
            self.zip = zipfile.ZipFile(self.file)
        except zipfile.BadZipFile as exc:
            raise zipfile.BadZipFile(f"{url}: no zip central directory in its last bytes ({exc})") from exc

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1].split("#", 1)[0]

    def members(self) -> list[Member]:
        return [Member(i.filename, i.file_size, i.compress_size) for i in self.zip.infolist()]

    def open(self, name: str) -> IO[bytes]:
        """One member as a stream: inflated as it is read, so a caller that stops early fetches only what it read
        (the member's CRC-32 is then never checked: it covers the whole member)."""
        try:
            return self.zip.open(name)
        except KeyError:
            raise KeyError(f"{self.filename}: no member {name}") from None

    def read(self, name: str) -> bytes:
        """One member's bytes, inflated (zipfile checks the member's CRC-32: the bytes are the ones zipped)."""
        try:
            return self.zip.read(name)
        except KeyError:
            raise KeyError(f"{self.filename}: no member {name}") from None
