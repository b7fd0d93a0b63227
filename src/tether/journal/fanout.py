"""Attached parties: watchers of a session's journal, served by its owner.

Theory of operation
-------------------
A watcher is an IPC ``watch`` request. It names a cursor (the first ``seq`` it wants);
the owner answers with the entries from there on, then every new entry the moment it
is journaled, in ``seq`` order, with no gap and no duplicate:

1. *Replay.* While the cursor is older than the writer's in-memory ring, entries come
   from the database in chunks (read in a thread; the owner's loop never blocks on it),
   each chunk written with back-pressure (``drain``): a slow replay slows only itself.
2. *Switch to live.* Once the cursor is inside the ring, the rest of the ring is sent
   and the watcher joins the listeners -- in one step of the event loop, so no entry
   can fall between the two.
3. *Live.* Each entry is queued on the watcher's :class:`Outbox`, flushed once per
   loop pass. A watcher never slows the turn: when its unsent bytes pass the bound it
   gets a terminal ``lagged`` frame carrying the last ``seq`` it was given and is
   dropped; it can resume from the journal at ``lastSeq + 1``.

The session's end (``session_ended``) and the owner's retirement end every watch with
a terminal ``result`` naming why and the last ``seq``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from tether import _fastjson
from tether.journal import store
from tether.journal.writer import JournalWriter, open_db

DEFAULT_BUFFER_LIMIT = 8 * 1024 * 1024  # unsent bytes per connection before `lagged`
CLOSE_GRACE_S = 5.0  # a lagged peer that never reads is cut off after this


class Outbox:
    """Buffered, bounded output to one connection, written once per event-loop pass.

    ``put`` never blocks and never raises: a peer that left is ``closed``; a peer that
    does not read fast enough is ``lagged`` once its unsent bytes pass ``limit`` and
    gets nothing more from ``put``.
    """

    def __init__(
        self,
        writer: asyncio.StreamWriter,
        *,
        limit: int = DEFAULT_BUFFER_LIMIT,
        on_lagged: Callable[[], None] | None = None,
    ) -> None:
        self.writer = writer
        self.limit = limit
        self.on_lagged = on_lagged
        self.closed = False
        self.lagged = False
        self._out: list[bytes] = []
        self._size = 0
        self._scheduled = False

    def put(self, data: bytes) -> bool:
        if self.closed or self.lagged:
            return False
        self._out.append(data)
        self._size += len(data)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)
        return True

    def flush(self) -> None:
        self._scheduled = False
        if not self._out:
            return
        data, self._out, self._size = b"".join(self._out), [], 0
        if self.closed:
            return
        transport = self.writer.transport
        if transport.is_closing():
            self.closed = True
            return
        try:
            transport.write(data)
        except (ConnectionError, RuntimeError):
            self.closed = True
            return
        if not self.lagged and transport.get_write_buffer_size() > self.limit:
            self.lagged = True
            if self.on_lagged is not None:
                self.on_lagged()

    def unsent(self) -> int:
        return self._size + self.writer.transport.get_write_buffer_size()

    def end(self, frame: bytes) -> None:
        """Write a last frame past the bound, then close; cut off a peer that never reads."""
        self.flush()
        if self.closed:
            return
        self.closed = True
        transport = self.writer.transport
        with contextlib.suppress(Exception):
            transport.write(frame)
            transport.close()
            asyncio.get_running_loop().call_later(CLOSE_GRACE_S, transport.abort)


class Watch:
    """One attached watcher (an IPC ``watch`` request)."""

    def __init__(
        self,
        writer: asyncio.StreamWriter,
        request_id: str,
        *,
        limit: int = DEFAULT_BUFFER_LIMIT,
        on_end: Callable[[Watch], None] | None = None,
    ) -> None:
        self.request_id = request_id
        self.cursor = 1  # the next seq this watcher is to get
        self.outbox = Outbox(writer, limit=limit, on_lagged=self._lagged)
        self.on_end = on_end
        self.ended = False
        rid = _fastjson.dumps(request_id)
        self._prefix = b'{"type":"entry","requestId":' + rid.encode() + b',"entry":'

    def frame(self, line: str) -> bytes:
        return self._prefix + line.encode() + b"}\n"

    def deliver(self, seq: int, line: str) -> None:
        if seq < self.cursor or self.ended:
            return
        if self.outbox.put(self.frame(line)):
            self.cursor = seq + 1

    def _lagged(self) -> None:
        self.finish({"type": "lagged", "requestId": self.request_id, "lastSeq": self.cursor - 1})

    def finish(self, frame: dict[str, Any]) -> None:
        """End this watch with one terminal frame (later calls are ignored)."""
        if self.ended:
            return
        self.ended = True
        self.outbox.end((_fastjson.dumps(frame) + "\n").encode())
        if self.on_end is not None:
            self.on_end(self)

    def result(self, reason: str) -> None:
        self.finish(
            {
                "type": "result",
                "requestId": self.request_id,
                "result": {"action": "watch_ended", "reason": reason, "lastSeq": self.cursor - 1},
            }
        )


class Fanout:
    """Every watcher of one session, fed by its :class:`JournalWriter`."""

    def __init__(self, journal: JournalWriter) -> None:
        self.journal = journal
        self.watches: set[Watch] = set()
        journal.listeners.append(self._on_entry)

    def _on_entry(self, seq: int, line: str) -> None:
        for watch in tuple(self.watches):
            watch.deliver(seq, line)

    def _drop(self, watch: Watch) -> None:
        self.watches.discard(watch)

    async def attach(self, watch: Watch, from_seq: int, *, follow: bool) -> None:
        """Replay from ``from_seq``, then (``follow``) go live; see the module docstring."""
        watch.on_end = self._drop
        watch.cursor = max(1, from_seq)
        journal = self.journal
        db = None
        try:
            while not watch.ended:
                ring = journal.ring
                first = ring[0][0] if ring else journal.next_seq
                if watch.cursor >= first:
                    # Inside the ring: finish synchronously, then join the listeners, with
                    # no await in between, so no entry falls between replay and live.
                    for seq, line in tuple(ring):
                        watch.deliver(seq, line)
                    watch.cursor = max(watch.cursor, journal.next_seq)
                    if follow:
                        self.watches.add(watch)
                    else:
                        watch.result("caught-up")
                    return
                if db is None:
                    db = await asyncio.to_thread(open_db, journal.db_path)
                rows = await asyncio.to_thread(
                    store.read,
                    db,
                    journal.key,
                    watch.cursor,
                    upto=first - 1,
                    limit=store.READ_CHUNK,
                )
                if not rows:
                    watch.cursor = first  # retention removed them: the seq jump shows it
                    continue
                await self._replay(watch, rows)
        finally:
            if db is not None:
                await asyncio.to_thread(db.close)

    async def _replay(self, watch: Watch, rows: list[store.Row]) -> None:
        from tether.journal.entry import entry_line

        frames = [watch.frame(entry_line(*row)) for row in rows]
        writer = watch.outbox.writer
        try:
            writer.write(b"".join(frames))
            await writer.drain()
        except (ConnectionError, RuntimeError):
            watch.ended = True
            return
        watch.cursor = rows[-1][0] + 1

    def end_all(self, reason: str) -> None:
        """The session ended or the owner retires: every watch gets its terminal frame."""
        for watch in tuple(self.watches):
            watch.result(reason)
        self.watches.clear()
