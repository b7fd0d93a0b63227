"""One client's event stream: stored entries replayed, then the session's hub followed.

The shared side -- one follower per session and its ring -- is :mod:`tether.serve.stream`
(whose docstring tells the whole story); this is what each client runs on its own: a
cursor, database reads while it is older than the ring, then windows of the ring.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Final

from tether.errors import TetherError
from tether.serve.sse import sse_control, sse_event
from tether.serve.stream import Hub, Hubs

CHUNK_ENTRIES: Final = 1024  # stored entries per database read for one client
# While a fleet host's stream has relayed entries not yet durable off-host, it looks at
# the durable seq this often (the host ships every 0.2 s); otherwise only on its own wakeups.
DURABLE_POLL_S: Final = 0.25
# A session with no durable seq after this many quick waits (10 s) is not one the host
# ships (a local session of a fleet host): its stream stops looking often.
DURABLE_NONE_LOOKS: Final = 40


class _Durable:
    """A fleet session's durable (shipped) seq as a stream reports it: ``event: durable``
    with ``{"durableSeq": N}`` at the start and whenever it advances. No ``id:``: the
    event is not a journal entry, and ``Last-Event-ID`` resume never sees it."""

    def __init__(self, read: Callable[[], int | None]) -> None:
        self._read = read
        self.sent: int | None = None
        self._none_looks = 0

    def note(self) -> bytes | None:
        """The event to send now, if the durable seq moved since the last one."""
        seq = self._read()
        if seq is None or seq == self.sent:
            return None
        self.sent = seq
        return sse_control("durable", {"durableSeq": seq}).encode()

    def behind(self, relayed: int) -> bool:
        """Whether entries relayed are not known durable yet (so: look again soon).
        Asked when the stream would wait; counts the waits with nothing shipped."""
        if self.sent is None:
            self._none_looks += 1
            return self._none_looks <= DURABLE_NONE_LOOKS
        return self.sent < relayed


def read_rows(key: str, cursor: int, limit: int) -> list[tuple[int, str]]:
    from tether.serve import lookups

    with lookups.registry() as registry:  # this worker thread's connection, reused
        rows = registry.journal_read(key, cursor, limit=limit)
    return [(seq, line.decode()) for seq, line in rows]


def _chunk(items: list[tuple[int, str]]) -> bytes:
    return "".join(sse_event(seq, line) for seq, line in items).encode()


async def replay(key: str, cursor: int, upto: int) -> AsyncIterator[bytes]:
    """Stored entries ``cursor..upto`` (a closed session's stream), then the end."""
    try:
        while cursor <= upto:
            rows = await asyncio.to_thread(read_rows, key, cursor, CHUNK_ENTRIES)
            rows = [r for r in rows if r[0] <= upto]
            if not rows:
                break
            cursor = rows[-1][0] + 1
            yield _chunk(rows)
    except TetherError as exc:  # the headers are out: the error becomes the last event
        yield sse_control("error", {"detail": exc.message, "lastSeq": cursor - 1}).encode()


async def follow(
    hubs: Hubs,
    hub: Hub,
    cursor: int | None,
    *,
    heartbeat: float,
    stopping: asyncio.Event,
    durable_seq: Callable[[], int | None] | None = None,
) -> AsyncIterator[bytes]:
    """One client's stream from ``cursor`` (None: live only) until the session ends.

    The caller has acquired ``hub``; it is released here, whatever ends the stream.
    ``durable_seq`` (a fleet host's): see :class:`_Durable`.
    """
    durable = None if durable_seq is None else _Durable(durable_seq)
    try:
        yield b"retry: 1000\n\n"
        await hub.ready.wait()
        if cursor is None:
            cursor = hub.next_seq
        live = False
        quiet = 0.0  # seconds waited since anything was sent
        while not stopping.is_set():
            note = None if durable is None else durable.note()
            if note is not None:
                quiet = 0.0
                yield note
            if hub.error is not None:
                yield sse_control(
                    "error", {"detail": hub.error.message, "lastSeq": cursor - 1}
                ).encode()
                return
            if cursor < hub.first:
                if live:
                    hubs.lagged_total += 1
                    yield sse_control("lagged", {"lastSeq": cursor - 1}).encode()
                    return
                try:
                    rows = await asyncio.to_thread(read_rows, hub.key, cursor, CHUNK_ENTRIES)
                except TetherError as exc:  # the headers are out: say it as the last event
                    detail = {"detail": exc.message, "lastSeq": cursor - 1}
                    yield sse_control("error", detail).encode()
                    return
                rows = [r for r in rows if r[0] < hub.first]
                if rows:
                    cursor = rows[-1][0] + 1
                    yield _chunk(rows)
                    continue
                if cursor < hub.first:
                    # Stored entries we need are not committed yet (the owner writes a
                    # batch right after relaying it): they will be in a moment.
                    await asyncio.sleep(0.02)
                    continue
            got = hub.slice_from(cursor)
            if got is not None:
                live = True
                data, cursor = got
                hubs.quiet.touch()
                yield data
                continue
            if hub.ended or hub.closing:
                return
            wait = heartbeat
            if durable is not None and durable.behind(cursor - 1):
                wait = min(heartbeat, DURABLE_POLL_S)
            if await hub.changed(wait):
                quiet = 0.0
                continue
            quiet += wait
            if quiet >= heartbeat:
                quiet = 0.0
                yield b": heartbeat\n\n"
    finally:
        hubs.release(hub)
