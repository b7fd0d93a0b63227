"""Journal chunks: runs of consecutive entries' public lines as one stored value.

No I/O: packing, unpacking and splitting, used by :mod:`tether.state.journal.store`. A chunk
is the entries' lines, each ending in LF, zlib-compressed when large (codec 1) or plain
(codec 0). Every line starts ``{"seq":N,"at":T,`` (see :func:`tether.state.journal.entry.
entry_line`), so a reader takes an entry's seq and time off its head, undecoded.

A stored chunk may be damaged (a flipped byte on disk, a hand edit): :func:`decode`
checks one against its row (first and last seq, entry count) and says why it is
unusable instead of raising, so a reader skips it and names its seq range, and ``tether
doctor`` reports it. A compressed chunk carries zlib's checksum, so damage in it fails
decompression; a plain chunk (under 1 KiB) has none, so every line of it is decoded as
JSON, which is cheap at that size. ``full`` decodes every line of a compressed one too
(the doctor's pass). A flip that leaves valid JSON in a plain chunk cannot be told from
data.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from typing import TypeVar

from tether import _fastjson

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


def decode(
    codec: int, data: bytes, first: int, last: int, entries: int, *, full: bool = False
) -> tuple[list[bytes], str | None]:
    """A stored chunk's lines, checked against its row: ``(lines, None)``, or ``([], why)``
    when it is damaged (see the module docstring)."""
    if codec == ZLIB:
        try:
            data = zlib.decompress(data)
        except zlib.error as exc:
            return [], f"does not decompress ({exc})"
    elif codec != PLAIN:
        return [], f"is in an unknown encoding ({codec})"
    data = bytes(data)
    if not data.endswith(b"\n"):
        return [], "is cut short"
    try:
        data.decode()
    except UnicodeDecodeError as exc:
        return [], f"is not UTF-8 at byte {exc.start}"
    lines = data.split(b"\n")[:-1]
    if not lines or len(lines) != entries:
        return [], f"holds {len(lines)} entries where its record says {entries}"
    # Heads: a compressed chunk's first and last (zlib's checksum vouches for the rest;
    # a reader reading the seqs off every head still meets a bad one as damage), every
    # line's for a plain chunk or a full check.
    thorough = full or codec == PLAIN
    previous = first - 1
    for line in lines if thorough else [lines[0], *lines[1:][-1:]]:
        try:
            seq = seq_of(line) if line.startswith(b'{"seq":') else -1
            at_of(line)
        except ValueError:
            seq = -1
        if seq <= previous:
            return [], "has an entry whose seq or time is unreadable, or out of order"
        previous = seq
    if seq_of(lines[0]) != first or previous != last:
        return [], f"holds seqs {seq_of(lines[0])}-{previous} where its record says {first}-{last}"
    if thorough:
        for line in lines:
            try:
                value = _fastjson.loads(line.decode())
            except ValueError:
                return [], f"has entry {seq_of(line)} that is not valid JSON"
            if not isinstance(value, dict) or value.get("seq") != seq_of(line):
                return [], f"has entry {seq_of(line)} that is not a journal entry"
    return lines, None


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
