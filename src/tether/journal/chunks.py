"""Journal chunks: runs of consecutive entries' public lines as one stored value.

No I/O: packing, unpacking and splitting, used by :mod:`tether.journal.store`. A chunk
is the entries' lines, each ending in LF, zlib-compressed when large (codec 1) or plain
(codec 0). Every line starts ``{"seq":N,"at":T,`` (see :func:`tether.journal.entry.
entry_line`), so a reader takes an entry's seq and time off its head, undecoded.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Iterator, Sequence
from typing import TypeVar

CHUNK_ENTRIES = 512  # entries per stored chunk at most ...
CHUNK_BYTES = 128 * 1024  # ... and bytes (a reader from the middle unpacks one chunk)
COMPRESS_FROM = 1024  # smaller chunks are stored plain: zlib would not pay for itself
PLAIN, ZLIB = 0, 1

# Anything whose third field is the entry's line (the store's pending entries).
T = TypeVar("T", bound=tuple[object, object, bytes, object])


def seq_of(line: bytes) -> int:
    """The ``seq`` of an entry's public line, read off its head (``{"seq":N,...``)."""
    return int(line[7 : line.index(b",", 7)])


def at_of(line: bytes) -> float:
    """The ``at`` of an entry's public line, read off its head."""
    start = line.index(b',"at":', 7) + 6
    return float(line[start : line.index(b",", start)])


def pack(lines: Sequence[bytes]) -> tuple[int, bytes]:
    """A chunk's (codec, stored bytes) for these lines."""
    data = b"\n".join(lines) + b"\n"
    if len(data) < COMPRESS_FROM:
        return PLAIN, data
    return ZLIB, zlib.compress(data, 1)


def unpack(codec: int, data: bytes) -> list[bytes]:
    """A stored chunk's lines (without their LF).

    Raises:
        sqlite3.DatabaseError: the chunk is damaged or in an unknown encoding.
    """
    if codec == ZLIB:
        try:
            data = zlib.decompress(data)
        except zlib.error as exc:  # a damaged database: the state's error, not zlib's
            raise sqlite3.DatabaseError(f"journal chunk damaged: {exc}") from None
    elif codec != PLAIN:
        raise sqlite3.DatabaseError(f"journal chunk in an unknown encoding ({codec})")
    return bytes(data).split(b"\n")[:-1]


def chunks(items: Sequence[T]) -> Iterator[Sequence[T]]:
    """Split a batch into runs of at most CHUNK_ENTRIES entries and about CHUNK_BYTES."""
    begin = size = 0
    for index, item in enumerate(items):
        if index > begin and (index - begin >= CHUNK_ENTRIES or size >= CHUNK_BYTES):
            yield items[begin:index]
            begin, size = index, 0
        size += len(item[2]) + 1
    if begin < len(items):
        yield items[begin:]
