"""Server-Sent Events from a session's journal: one follower per session, many clients.

Theory of operation
-------------------
The journal is the source of truth; the gateway keeps nothing it could not read back.
For each session that has SSE clients it runs one **hub**: a thread running
:func:`tether.journal.follow.follow_session` (the one follower implementation: live
from the owner, back to the database across owner restarts) that appends every entry
to a bounded in-memory **ring** (entries and bytes). Each client keeps its own cursor:

* a cursor older than the ring (a replay, ``Last-Event-ID`` or ``?from=``) is served
  from the database in chunks until it reaches the ring;
* then from the ring, as entries arrive, each written as ``id: <seq>`` /
  ``data: <entry JSON>``;
* a client that was live and fell so far behind that the ring moved past its cursor
  gets ``event: lagged`` with its last ``seq`` and is disconnected: it reconnects with
  ``Last-Event-ID`` and replays the rest from the journal. Nobody waits for it: the
  hub appends regardless, so a slow client never slows the turn or other clients.

``session_ended`` ends a session's stream after it is delivered (once: the follower
stops there). A closed session's stream replays what is stored and ends; a client
asking past its end gets ``204`` (which also stops a browser's EventSource from
reconnecting). With nothing to send, a comment line (``: heartbeat``) goes out every
``heartbeat`` seconds so proxies keep the connection open.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any, Final

from tether import _fastjson, operations
from tether.errors import TetherError
from tether.journal import store
from tether.journal.follow import Follower, is_session_end

RING_ENTRIES: Final = 4096  # per session hub (env TETHER_SERVE_RING); sandbox-agent keeps 1024
RING_BYTES: Final = 8 * 1024 * 1024
CHUNK_ENTRIES: Final = 1024  # entries per write to one client (bounded memory per client)
PENDING_MAX: Final = 8192  # entries the follower thread may hand over before the loop takes them
HEARTBEAT_S: Final = 15.0


def sse_event(seq: int, line: str) -> str:
    if "\r" in line:  # JSON allows \r only as whitespace between tokens: drop it
        line = line.replace("\r", "")
    return f"id: {seq}\ndata: {line}\n\n"


def sse_control(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {_fastjson.dumps(data)}\n\n"


class Hub:
    """One session's live tail: a follower thread feeding a bounded ring."""

    def __init__(
        self,
        key: str,
        loop: asyncio.AbstractEventLoop,
        ring_entries: int = RING_ENTRIES,
        *,
        control: bool = False,
    ) -> None:
        self.key = key
        self.loop = loop
        self.ring_entries = ring_entries
        # A controller hub attaches to the owner as one (``control``): while it is
        # attached, the agent's questions wait for an answer over HTTP instead of being
        # decided at once by the non-interactive policy. Questions reach the clients as
        # the journal's ``interaction_opened``/``interaction_resolved`` entries.
        self.control = control
        self.seqs: list[int] = []
        self.lines: list[str] = []
        self.ring_bytes = 0
        self.first = 0  # every seq below this is no longer in the ring
        self.next_seq = 0  # one past the last seq received
        self.ended = False  # session_ended received: nothing more will come
        self.error: TetherError | None = None
        self.closing = False
        self.clients = 0
        self.ready = asyncio.Event()
        self._changed = asyncio.Event()
        self._stop = threading.Event()
        self._follower: Follower | None = None
        self._pending: list[tuple[int, str]] = []
        self._cond = threading.Condition()
        self._scheduled = False
        self._thread = threading.Thread(target=self._run, name=f"sse-{key[:8]}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # --- the follower thread ------------------------------------------------------------

    def _run(self) -> None:
        error: TetherError | None = None
        try:
            operations.watch(  # the visibility check, then follow_session
                self.key,
                self._emit,
                stop=self._stop,
                on_start=self._on_start,
                control=_offered if self.control else None,
            )
        except TetherError as exc:
            error = exc
        except Exception as exc:  # a bug must reach the clients, not kill the thread silently
            error = TetherError(f"the journal follower failed: {exc}")
        with contextlib.suppress(RuntimeError):  # the loop is gone: we are shutting down
            self.loop.call_soon_threadsafe(self._finish, error)

    def _on_start(self, follower: Follower) -> None:
        self._follower = follower
        with contextlib.suppress(RuntimeError):  # the loop is gone: we are shutting down
            self.loop.call_soon_threadsafe(self._started, follower.cursor)

    def _emit(self, seq: int, line: str) -> None:
        with self._cond:
            # Only if the loop itself falls this far behind do we wait (never on a client).
            while len(self._pending) >= PENDING_MAX and not self._stop.is_set():
                self._cond.wait(0.1)
            self._pending.append((seq, line))
            if self._scheduled:
                return
            self._scheduled = True
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._drain)

    # --- the event loop -----------------------------------------------------------------

    def _started(self, cursor: int) -> None:
        self.first = self.next_seq = cursor
        self.ready.set()

    def _drain(self) -> None:
        with self._cond:
            batch, self._pending = self._pending, []
            self._scheduled = False
            self._cond.notify_all()
        if not batch:
            return
        for seq, line in batch:
            self.seqs.append(seq)
            self.lines.append(line)
            self.ring_bytes += len(line)
            self.next_seq = seq + 1
            if is_session_end(line):
                self.ended = True
        self._trim()
        self._wake()

    def _trim(self) -> None:
        count = len(self.seqs)
        limit = self.ring_entries
        cut = count - limit + limit // 4 if count > limit else 0  # cut in bulk
        removed = sum(len(x) for x in self.lines[:cut])
        while self.ring_bytes - removed > RING_BYTES and cut < count:
            removed += len(self.lines[cut])
            cut += 1
        if cut <= 0:
            return
        self.ring_bytes -= removed
        del self.seqs[:cut]
        del self.lines[:cut]
        self.first = self.seqs[0] if self.seqs else self.next_seq

    def _finish(self, error: TetherError | None) -> None:
        self._drain()
        if error is not None and not self.closing:
            self.error = error
        self.ended = True
        self.ready.set()
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def changed(self, timeout: float) -> bool:
        """Wait for new entries (or the end); False after ``timeout`` with none."""
        event = self._changed
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            return False
        return True

    def slice_from(self, cursor: int, limit: int) -> list[tuple[int, str]]:
        start = bisect.bisect_left(self.seqs, cursor)
        end = min(len(self.seqs), start + limit)
        return list(zip(self.seqs[start:end], self.lines[start:end], strict=True))

    def close(self) -> None:
        """Stop following (from the loop); the thread ends on its own."""
        self.closing = True
        self._stop.set()
        follower = self._follower
        if follower is not None:
            follower.interrupt()
        with self._cond:
            self._cond.notify_all()
        self._wake()


def _offered(_frame: dict[str, Any]) -> None:
    """A question frame offered to us as a controller: the journal carries it too."""


class Hubs:
    """The gateway's hubs, one per followed session, dropped with their last client."""

    def __init__(self, ring_entries: int = RING_ENTRIES) -> None:
        self.ring_entries = ring_entries
        self.by_key: dict[tuple[str, bool], Hub] = {}
        self.lagged_total = 0
        self.clients_total = 0

    def acquire(self, key: str, *, control: bool = False) -> Hub:
        hub = self.by_key.get((key, control))
        if hub is None or hub.ended or hub.closing:
            hub = Hub(key, asyncio.get_running_loop(), self.ring_entries, control=control)
            self.by_key[key, control] = hub
            hub.start()
        hub.clients += 1
        self.clients_total += 1
        return hub

    def release(self, hub: Hub) -> None:
        hub.clients -= 1
        if hub.clients <= 0:
            hub.close()
            if self.by_key.get((hub.key, hub.control)) is hub:
                del self.by_key[hub.key, hub.control]

    def clients(self) -> int:
        return sum(h.clients for h in self.by_key.values())

    def close_all(self) -> None:
        for hub in list(self.by_key.values()):
            hub.close()
        self.by_key.clear()


def read_rows(key: str, cursor: int, limit: int) -> list[tuple[int, str]]:
    from tether.registry import Registry

    with Registry() as registry:
        rows = store.read(registry._db, key, cursor, limit=limit)
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
) -> AsyncIterator[bytes]:
    """One client's stream from ``cursor`` (None: live only) until the session ends.

    The caller has acquired ``hub``; it is released here, whatever ends the stream.
    """
    try:
        yield b"retry: 1000\n\n"
        await hub.ready.wait()
        if cursor is None:
            cursor = hub.next_seq
        live = False
        while not stopping.is_set():
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
            items = hub.slice_from(cursor, CHUNK_ENTRIES)
            if items:
                live = True
                cursor = items[-1][0] + 1
                yield _chunk(items)
                if is_session_end(items[-1][1]):
                    return
                continue
            if hub.ended or hub.closing:
                return
            if not await hub.changed(heartbeat):
                yield b": heartbeat\n\n"
    finally:
        hubs.release(hub)
