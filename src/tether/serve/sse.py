"""Server-Sent Events as bytes: one event per journal entry, built in bulk.

The relay's unit is a :class:`Chunk`: consecutive entries already written as SSE events
(``id: <seq>`` / ``data: <entry JSON>``), so that a hub's ring, its clients' cursors and
the writes to them all work on runs of entries -- never one Python call per entry on the
hot path. No I/O here.
"""

from __future__ import annotations

import itertools
from typing import Any, Final, NamedTuple

from tether import _fastjson

CHUNK_BYTES: Final = 256 * 1024  # the ring's unit: a relayed block, or catch-up entries
_NEXT_ID: Final = b"\n\nid: %d\ndata: "


def sse_event(seq: int, line: str) -> str:
    if "\r" in line:  # JSON allows \r only as whitespace between tokens: drop it
        line = line.replace("\r", "")
    return f"id: {seq}\ndata: {line}\n\n"


def sse_block(first: int, entries: list[bytes]) -> bytes:
    """The SSE events of ``entries`` (lines of seqs ``first``, ``first + 1``...), built
    with a few C-level calls rather than once per entry."""
    ids = map(_NEXT_ID.__mod__, range(first + 1, first + len(entries)))
    data = b"".join(
        itertools.chain(
            (b"id: %d\ndata: " % first,),
            itertools.chain.from_iterable(zip(entries, ids, strict=False)),
            (entries[-1], b"\n\n"),
        )
    )
    if b"\r" in data:  # JSON allows \r only as whitespace between tokens: drop it
        data = data.replace(b"\r", b"")
    return data


def sse_control(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {_fastjson.dumps(data)}\n\n"


def event_offset(data: bytes, cursor: int) -> int:
    """Where in ``data`` (SSE events in seq order) the first event at ``cursor`` or
    later starts; ``len(data)`` if none does."""
    if data.startswith(b"id: %d\n" % cursor):
        return 0
    at = data.find(b"\n\nid: %d\n" % cursor)
    if at >= 0:
        return at + 2
    at = 0  # a seq missing from the journal: the next event after it
    while at < len(data):
        end = data.index(b"\n", at)
        if int(data[at + 4 : end]) >= cursor:
            return at
        nxt = data.find(b"\n\nid: ", end)
        at = len(data) if nxt < 0 else nxt + 2
    return len(data)


def events_within(data: bytes, start: int, room: int) -> int:
    """The end of the events of ``data`` from ``start`` (an event's head) that fit in
    ``room`` bytes: an event boundary, ``start`` itself if not even one event fits."""
    if len(data) - start <= room:
        return len(data)
    at = data.rfind(b"\n\nid: ", start, start + room + 4)  # its "\n\n" inside the room
    return start if at < 0 else at + 2


def next_event(data: bytes, start: int) -> int:
    """Where the event after the one at ``start`` begins (``len(data)``: none does)."""
    at = data.find(b"\n\nid: ", start)
    return len(data) if at < 0 else at + 2


def seq_at(data: bytes, offset: int) -> int:
    """The seq of the event starting at ``offset`` (``id: <seq>``)."""
    return int(data[offset + 4 : data.index(b"\n", offset)])


class Chunk(NamedTuple):
    """Consecutive journal entries as SSE events, ``first..last`` (seqs)."""

    first: int
    last: int
    data: bytes
    end: bool  # holds session_ended (the last entry there will be)


def merged(batch: list[Chunk], max_entries: int) -> list[Chunk]:
    """Adjacent chunks of one hand-over joined up to ``CHUNK_BYTES`` and ``max_entries``
    (catch-up entries arrive one by one; the ring and the clients handle them by the
    hundred, and the ring still trims in steps well below its bound)."""
    out: list[Chunk] = []
    group: list[Chunk] = []
    size = count = 0
    for chunk in batch:
        entries = chunk.last - chunk.first + 1
        if group and (size + len(chunk.data) > CHUNK_BYTES or count + entries > max_entries):
            out.append(_joined(group))
            group, size, count = [], 0, 0
        group.append(chunk)
        size += len(chunk.data)
        count += entries
    out.append(_joined(group))
    return out


def _joined(group: list[Chunk]) -> Chunk:
    if len(group) == 1:
        return group[0]
    data = b"".join(c.data for c in group)
    return Chunk(group[0].first, group[-1].last, data, any(c.end for c in group))
