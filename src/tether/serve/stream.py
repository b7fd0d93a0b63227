"""Server-Sent Events from a session's journal: one follower per session, many clients.

Theory of operation
-------------------
The journal is the source of truth; the gateway keeps nothing it could not read back.
For each session that has SSE clients it runs one **hub**: a task reading
:func:`tether.operations.watch_batches` (the one follower: the database read in its
thread, the live owner read on the loop, across owner restarts) that appends
every entry to a bounded in-memory **ring** (entries and bytes). Each client keeps its own cursor:

* a cursor older than the ring (a replay, ``Last-Event-ID`` or ``?from=``) is served
  from the database in chunks until it reaches the ring;
* then from the ring, as entries arrive, each written as ``id: <seq>`` /
  ``data: <entry JSON>``, in windows of whole events up to ``SEND_BYTES``, the next
  once the connection has taken the last: a client that does not read holds one small
  window in the gateway, never its own copy of a turn (the ring is shared);
* a client that was live and fell so far behind that the ring moved past its cursor
  gets ``event: lagged`` with its last ``seq`` and is disconnected: it reconnects with
  ``Last-Event-ID`` and replays the rest from the journal. Nobody waits for it: the
  hub appends regardless, so a slow client never slows the turn or other clients.

``session_ended`` ends a session's stream after it is delivered (once: the follower
stops there). A closed session's stream replays what is stored and ends; a client
asking past its end gets ``204`` (which also stops a browser's EventSource from
reconnecting). With nothing to send, a comment line (``: heartbeat``) goes out every
``heartbeat`` seconds so proxies keep the connection open.

The hot path has no work per entry in Python: the follower hands over each run of live
entries it read as one block (:func:`tether.state.journal.live_frames.block_taker`), which
is turned into SSE bytes (:func:`tether.serve.sse.sse_block`) where it was read -- on the
loop, with no thread between the owner's socket and the ring; the ring holds such
chunks, and a client takes what it is behind by a window at a time (a chunk wanted
whole is written as it is, not copied).
After a burst the gateway gives freed memory back (:mod:`tether.serve.memory`). A hub
outlives its last client by ``LINGER_S``, so the stream a client opens after each prompt
finds the session followed already.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
from collections.abc import Callable
from typing import Any, Final

from tether import _aio, operations
from tether.errors import TetherError
from tether.serve.memory import QuietTrim
from tether.serve.sse import (
    Chunk,
    event_offset,
    events_within,
    merged,
    next_event,
    seq_at,
    sse_block,
    sse_event,
)
from tether.state.journal.follow import SESSION_END, is_session_end

RING_ENTRIES: Final = 4096  # per session hub (env TETHER_SERVE_RING); sandbox-agent keeps 1024
RING_BYTES: Final = 8 * 1024 * 1024
SEND_BYTES: Final = 16 * 1024  # at most this much per write to one client (see slice_from)
PENDING_MAX: Final = 8192  # entries the follower may hand over before the hub takes them
HEARTBEAT_S: Final = 15.0
LINGER_S: Final = 30.0  # a hub outlives its last client this long: the next stream is warm
_FOLLOWING: set[asyncio.Task[None]] = set()  # hubs' follow tasks, held until they end


class Hub:
    """One session's live tail: a journal follower feeding a bounded ring of chunks."""

    def __init__(
        self,
        key: str,
        loop: asyncio.AbstractEventLoop,
        ring_entries: int = RING_ENTRIES,
        *,
        control: bool = False,
        touch: Callable[[], None] = lambda: None,
    ) -> None:
        self.key = key
        self.touch = touch  # entries relayed: the gateway's memory is trimmed after
        self.loop = loop
        self.ring_entries = ring_entries
        # A controller hub attaches to the owner as one (``control``): while it is
        # attached, the agent's questions wait for an answer over HTTP instead of being
        # decided at once by the non-interactive policy. Questions reach the clients as
        # the journal's ``interaction_opened``/``interaction_resolved`` entries.
        self.control = control
        # The ring: chunks in seq order, and their bounds for bisection.
        self.chunks: list[Chunk] = []
        self.lasts: list[int] = []
        self.ring_count = 0  # entries in the ring
        self.ring_bytes = 0
        self.first = 0  # every seq below this is no longer in the ring
        self.next_seq = 0  # one past the last seq received
        self.ended = False  # session_ended received: nothing more will come
        self.error: TetherError | None = None
        self.closing = False
        self.clients = 0
        self.expiry: asyncio.TimerHandle | None = None  # lingering without clients
        self.ready = asyncio.Event()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = _aio.spawn(self._follow(), keep=_FOLLOWING, name=f"sse-{self.key[:8]}")

    async def _follow(self) -> None:
        """Follow the session (:func:`tether.operations.watch_batches`: the visibility
        check, then the follower, whose chunks are made where it reads) into the ring."""
        error: TetherError | None = None
        try:
            batches = operations.watch_batches(
                self.key,
                self._chunk,
                block=self._chunk_block,
                count=_entries,
                bound=PENDING_MAX,
                on_start=self._started,
                control=_offered if self.control else None,
                door="http",
            )
            async with contextlib.aclosing(batches):
                async for batch in batches:
                    self._take(batch)
        except TetherError as exc:
            error = exc
        except Exception as exc:  # a bug must reach the clients, not end the task silently
            error = TetherError(f"the journal follower failed: {exc}")
        finally:
            self._finish(error)

    # --- where the follower reads (its thread for stored entries, the loop for live) ----

    @staticmethod
    def _chunk(seq: int, line: str) -> Chunk:
        """One entry (from the database, or a frame off the fast path)."""
        return Chunk(seq, seq, sse_event(seq, line).encode(), is_session_end(line))

    @staticmethod
    def _chunk_block(first: int, last: int, entries: list[bytes]) -> Chunk:
        """A run of live entries, converted in bulk (on the loop, as they are read)."""
        end = SESSION_END in entries[-1][:120]
        return Chunk(first, last, sse_block(first, entries), end)

    # --- the event loop -----------------------------------------------------------------

    def _started(self, cursor: int) -> None:
        self.first = self.next_seq = cursor
        self.ready.set()

    def _take(self, batch: list[Chunk]) -> None:
        """A batch the follower handed over, into the ring."""
        if not batch:
            return
        for chunk in merged(batch, max(1, self.ring_entries // 4)):
            self.chunks.append(chunk)
            self.lasts.append(chunk.last)
            self.ring_count += chunk.last - chunk.first + 1
            self.ring_bytes += len(chunk.data)
            self.next_seq = chunk.last + 1
            self.ended = self.ended or chunk.end
        self._trim()
        self.touch()
        self._wake()

    def _trim(self) -> None:
        """Drop the oldest entries in bulk, to 3/4 of the bound: whole chunks, then the
        head of the oldest chunk kept (one relayed block can outgrow the whole ring)."""
        if self.ring_count <= self.ring_entries and self.ring_bytes <= RING_BYTES:
            return
        keep_count = self.ring_entries - self.ring_entries // 4
        keep_bytes = RING_BYTES - RING_BYTES // 4
        chunks = self.chunks
        cut, count, size = 0, self.ring_count, self.ring_bytes
        while cut < len(chunks) - 1:
            entries = chunks[cut].last - chunks[cut].first + 1
            if count - entries < keep_count and size <= keep_bytes:
                break
            count -= entries
            size -= len(chunks[cut].data)
            cut += 1
        del chunks[:cut]
        del self.lasts[:cut]
        head = chunks[0]
        at = event_offset(head.data, head.first + count - keep_count)
        if count > keep_count and 0 < at < len(head.data):
            data = head.data[at:]
            first = int(data[4 : data.index(b"\n")])  # "id: <seq>"
            count -= first - head.first
            size -= at
            chunks[0] = Chunk(first, head.last, data, head.end)
        self.ring_count, self.ring_bytes = count, size
        self.first = chunks[0].first

    def _finish(self, error: TetherError | None) -> None:
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

    def slice_from(self, cursor: int, limit: int = SEND_BYTES) -> tuple[bytes, int] | None:
        """The ring's events from ``cursor`` on, at most ``limit`` bytes of whole events
        (one event, if it alone is larger), and the cursor after them; None if there is
        nothing yet. Small on purpose: what a client has been given but not read sits
        in its own buffers, so each stream holds a bounded window, not its own copy of
        a turn; the rest waits, shared, in the ring (see the module docstring)."""
        index = bisect.bisect_left(self.lasts, cursor)
        if index >= len(self.chunks):
            return None
        parts: list[bytes | memoryview] = []
        size = 0
        for chunk in itertools.islice(self.chunks, index, None):
            data = chunk.data
            start = event_offset(data, cursor) if chunk.first < cursor else 0
            end = events_within(data, start, limit - size)
            if end == start:
                if parts:
                    break
                end = next_event(data, start)  # one event larger than the limit: whole
            whole = start == 0 and end == len(data)
            parts.append(data if whole else memoryview(data)[start:end])
            size += end - start
            cursor = chunk.last + 1 if end == len(data) else seq_at(data, end)
            if end < len(data) or size >= limit:
                break
        only = parts[0]
        if len(parts) == 1 and isinstance(only, bytes):
            return only, cursor  # a chunk as it is in the ring: shared, not copied
        return b"".join(parts), cursor

    def close(self) -> None:
        """Stop following (from the loop); the follower lets go in the background."""
        self.closing = True
        if self._task is not None:
            self._task.cancel()
        self._wake()


def _entries(chunk: Chunk) -> int:
    return chunk.last - chunk.first + 1


def _offered(_frame: dict[str, Any]) -> None:
    """A question frame offered to us as a controller: the journal carries it too."""


class Hubs:
    """The gateway's hubs, one per followed session. A hub whose last client left
    lingers ``linger`` seconds (still following), so the next stream of that session --
    a client's request after each prompt -- starts from a warm ring."""

    def __init__(self, ring_entries: int = RING_ENTRIES, linger: float = LINGER_S) -> None:
        self.ring_entries = ring_entries
        self.linger = linger
        self.by_key: dict[tuple[str, bool], Hub] = {}
        self.lagged_total = 0
        self.clients_total = 0
        self.quiet = QuietTrim()  # memory given back after each burst (tether.serve.memory)

    def warm(self, key: str) -> Hub | None:
        """The session's following hub, if one is running and has not ended."""
        hub = self.by_key.get((key, False))
        if hub is None or hub.ended or hub.closing or not hub.ready.is_set():
            return None
        return hub

    def acquire(self, key: str, *, control: bool = False) -> Hub:
        hub = self.by_key.get((key, control))
        if hub is None or hub.ended or hub.closing:
            loop = asyncio.get_running_loop()
            hub = Hub(key, loop, self.ring_entries, control=control, touch=self.quiet.touch)
            self.by_key[key, control] = hub
            hub.start()
        if hub.expiry is not None:
            hub.expiry.cancel()
            hub.expiry = None
        hub.clients += 1
        self.clients_total += 1
        return hub

    def release(self, hub: Hub) -> None:
        hub.clients -= 1
        self.quiet.touch()
        if hub.clients > 0:
            return
        # A controller changes how the owner decides questions: it never lingers.
        if hub.control or hub.ended or hub.closing or self.linger <= 0:
            self._drop(hub)
        else:
            hub.expiry = hub.loop.call_later(self.linger, self._expire, hub)

    def _expire(self, hub: Hub) -> None:
        hub.expiry = None
        if hub.clients <= 0:
            self._drop(hub)

    def _drop(self, hub: Hub) -> None:
        hub.close()
        if self.by_key.get((hub.key, hub.control)) is hub:
            del self.by_key[hub.key, hub.control]

    def clients(self) -> int:
        return sum(h.clients for h in self.by_key.values())

    def close_all(self) -> None:
        self.quiet.cancel()
        for hub in list(self.by_key.values()):
            if hub.expiry is not None:
                hub.expiry.cancel()
            hub.close()
        self.by_key.clear()
