"""The owner's journal writer: seqs handed out on the event loop, batches committed by a thread.

Theory of operation
-------------------
:meth:`JournalWriter.append` runs on the owner's event loop. It assigns the next
``seq``, builds the entry's public line, keeps it in a small in-memory *ring* (what a
watcher attaching right now needs before the database has it), tells the listeners
(the attached parties), and queues the row. Nothing on the loop waits on SQLite; only
a turn's answer waits for its end to be stored (:mod:`.stored_waits`).

A daemon thread owns its own SQLite connection. It sleeps until rows are queued (woken
``BATCH_S`` after the first of them, or at once by any control record: a short turn is
one commit), takes everything queued as one batch, and commits it in one transaction
with the high-water mark: under a 50,000-updates-per-second stream a batch holds
hundreds of rows. Retention runs in the same thread every so often. A failed commit
(disk full, I/O error) keeps the batch and retries with backoff; the entries stay in
the ring until stored, so replays never skip them.

**A failing disk is a stated condition, never a stall.** The thread records the error
(:attr:`JournalWriter.failure`, a :class:`~tether.errors.StateError`: ``STATE_FULL`` for
a full disk) and tells the loop (``on_condition``), which tells the prompter and
``status``. While it fails, the loop does not wait for it: past the backlog bound the
oldest unstored frames are given up at once, each run replaced by one ``journal_gap``
record (:mod:`tether.state.journal.gaps`) that is stored when the disk takes writes again --
so the journal itself says what it lost, and the owner keeps answering (a loop that
waited on a full disk looked hung, and callers may fence a hung owner).

An owner killed with SIGKILL loses the rows not yet committed (the last milliseconds),
which watchers may have seen: a live writer works inside a stored *reservation*
(:func:`.store.claim`), so the next owner starts past it -- a gap, never a reused seq,
its first entry a ``journal_gap`` record (``owner-lost``). A clean stop releases it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from tether import _profile
from tether._fastjson import unicode_text
from tether.errors import StateError
from tether.state.journal import gaps, retention, store
from tether.state.journal.db import open_db
from tether.state.journal.entry import Retention, acp_body, body_of, entry_line
from tether.state.journal.stored_waits import StoredWaits
from tether.state.translate import translate_error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.metrics import MetricOp

logger = logging.getLogger("tether.state.journal")

RING_MIN = 4096  # entries kept in memory after they are stored, for attaching watchers
# The most unstored bytes the writer may fall behind by. Past it the event loop waits
# for the writer (bounded): it stops reading the agent meanwhile, which is the only
# back-pressure there is, and the owner's memory stays bounded under a flood.
MAX_BACKLOG_BYTES = 1024 * 1024  # a batch in flight plus this: about a megabyte each
STALL_MAX_S = 2.0
RETENTION_EVERY_S = 30.0
RETRY_MAX_S = 2.0
# How long appended entries wait for company before the thread is woken. A warm turn
# appends its ~6 entries over several loop passes within about a millisecond: woken once
# per pass, the thread committed 4-6 times per turn (issue 23: a third of the owner's
# CPU per turn). Any other record -- a turn's end above all -- wakes it at once, and the
# turn's caller is answered once that is stored (.stored_waits). So a warm turn is one
# commit; a SIGKILLed owner loses at most BATCH_S more of a running turn.
BATCH_S = 0.002
BATCHED_KINDS = frozenset({"acp", "prompt_queued", "turn_started"})

Listener = Callable[[int, bytes], None]  # (seq, the entry's public line, UTF-8)
# A session row a batch's commit also writes: (its changed columns, kept metric changes,
# and ``settle(written)``, told whether it was). A quick turn's entries and the owner's
# status then share one transaction and one wake-up of one thread, where they took two
# of each (issue 23: with a hundred owners taking turns at once, a sixth of the wall
# time of the burst).
Carry = tuple[dict[str, Any], list["MetricOp"], Callable[[bool], None]]


def _releasing(run: Callable[[], None], waits: StoredWaits) -> Callable[[], None]:
    """The writer's thread: ``run``, then no answer waits on it (stopped, given up)."""

    def thread() -> None:
        try:
            run()
        finally:
            waits.failing()

    return thread


class JournalWriter:
    """The single writer of one session's journal (the lock holder's)."""

    def __init__(self, db_path: str, key: str, *, retention: Retention | None = None) -> None:
        self.key = key
        self.db_path = db_path
        self.retention = retention or Retention()
        self._db = open_db(db_path)
        # The last seq stored by a previous writer that was lost (None: it stopped cleanly).
        self.lost_after = store.unreleased(self._db, key)
        self.next_seq = store.claim(self._db, key)
        self.first_seq = self.next_seq  # ours: everything below is an earlier writer's
        self.stored_seq = self.next_seq - 1  # written by the thread, read by the loop
        # (seq, line as UTF-8); trimmed only down to entries already stored.
        self.ring: collections.deque[tuple[int, bytes]] = collections.deque()
        self.listeners: list[Listener] = []
        self.bytes_written = 0
        self._pending: list[store.Stored] = []
        self._pending_bytes = 0
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)
        self._wake = threading.Event()
        self.stalls = 0  # times the loop waited for the writer (a slow disk)
        self.dropped = 0  # entries given up after a stall (a failing disk): a seq gap
        self._closing = False
        self._abandoned = 0  # entries never stored because the session went to another owner
        self._abandoning = False
        self._kick_handle: asyncio.TimerHandle | None = None  # the writer's BATCH_S wake-up
        # (direction, request id) -> the bytes of an acp entry's line after its seq and at
        self._acp_heads: dict[tuple[str, str | None], bytes] = {}
        self._at, self._at_text = 0.0, b"0.0"
        # Set by the thread while the disk refuses our writes; cleared once it takes them.
        self.failure: StateError | None = None
        # Called on the loop when ``failure`` is set or cleared (the owner tells people).
        self.on_condition: Callable[[], None] | None = None
        # Called by the thread as it commits a batch: the session row to write in the
        # same transaction, or None (the owner's status when it changed: see ``Carry``).
        self.carry: Callable[[], Carry | None] | None = None
        self.commit = store.write_batch  # a session host's: its GroupCommit's write_batch
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # no loop (tests): nobody to tell
            self._loop = None
        self.stored_waits = StoredWaits(self._loop, self.stored_seq)  # answers wait on it
        run = _releasing(self._run, self.stored_waits)
        run = _profile.target("writer", run)  # bench/turn_cpu.py --profile only
        self._thread = threading.Thread(target=run, name="journal-writer", daemon=True)
        self._thread.start()
        if self.lost_after is not None:
            # The previous writer was lost: our first entry says where we continue from.
            self.append(gaps.GAP_KIND, gaps.gap_payload(self.lost_after, gaps.OWNER_LOST))

    # --- the event loop's side ---------------------------------------------------------

    def append(self, kind: str, payload: dict[str, Any], request_id: str | None = None) -> int:
        """Journal a control record; returns its ``seq``."""
        return self.append_body(kind, body_of(payload), request_id)

    def append_acp(self, direction: str, line: bytes, request_id: str | None) -> int:
        """Journal one ACP frame, embedded byte for byte.

        The hot path of a streamed turn: the entry's line is built as bytes around the
        frame, with its head cached per request, with no JSON work and no str round trip
        (it is exactly :func:`~tether.state.journal.entry.entry_line` of :func:`acp_body`).
        """
        head = self._acp_heads.get((direction, request_id))
        if head is None:
            if len(self._acp_heads) > 64:
                self._acp_heads.clear()
            tail = entry_line(0, 0.0, "acp", request_id, acp_body(direction, b"")).encode()
            head = self._acp_heads[(direction, request_id)] = tail[tail.index(b',"kind"') : -1]
        seq = self.next_seq
        self.next_seq = seq + 1
        at, at_text = self._clock()
        line = b'{"seq":%d,"at":%s%s%s}' % (seq, at_text, head, line)
        return self._push(seq, at, line, None, urgent=False)

    def append_body(self, kind: str, body: str, request_id: str | None) -> int:
        seq = self.next_seq
        self.next_seq = seq + 1
        at = self._clock()[0]
        if not body.isascii():
            body = unicode_text(body)
        line = entry_line(seq, at, kind, request_id, body).encode()
        mark = None if kind == "acp" else (kind, request_id, body)
        return self._push(seq, at, line, mark, urgent=kind not in BATCHED_KINDS)

    def _clock(self) -> tuple[float, bytes]:
        """Now, to the millisecond, and its JSON text: an entry's time is journaled in
        milliseconds, and formatting a float per entry was a tenth of a streamed turn's
        cost on the owner's loop, so the text is made once per millisecond."""
        now = time.time()
        if now - self._at >= 0.001 or now < self._at:
            self._at = int(now * 1000) / 1000
            self._at_text = repr(self._at).encode()
        return self._at, self._at_text

    def _push(
        self, seq: int, at: float, line: bytes, mark: store.Mark | None, *, urgent: bool
    ) -> int:
        """Hand an entry (its line encoded once, for the store, every watcher and the ring
        alike) to the ring, the writer thread and the listeners; ``urgent``: the writer
        is woken now, not ``BATCH_S`` later."""
        ring = self.ring
        ring.append((seq, line))
        stored = self.stored_seq
        while len(ring) > RING_MIN and ring[0][0] <= stored:
            ring.popleft()
        with self._lock:
            self._pending.append((seq, at, line, mark))
            self._pending_bytes += len(line)
            if self._pending_bytes > MAX_BACKLOG_BYTES:
                self._stall()
        if urgent:
            self._kick()  # the thread takes everything pending, this entry with it
        elif self._kick_handle is None:
            try:
                self._kick_handle = asyncio.get_running_loop().call_later(BATCH_S, self._kick)
            except RuntimeError:  # no loop (tests, shutdown): wake at once
                self._kick()
        for listener in self.listeners:
            listener(seq, line)
        return seq

    def shrink(self) -> None:
        """Drop the stored entries from the ring (the owner is idle: a watcher attaching
        now reads them from the database, which has them)."""
        ring, stored = self.ring, self.stored_seq
        while ring and ring[0][0] <= stored:
            ring.popleft()

    def _stall(self) -> None:
        """The writer is far behind (the lock is held). A slow disk: wait for it,
        boundedly. A failing one, or a slow one that did not catch up: give the oldest
        frames up rather than grow, each run replaced by a gap record (:mod:`.gaps`)."""
        self.stalls += 1
        if self.failure is None:
            self._wake.set()
            self._drained.wait_for(
                lambda: self._pending_bytes <= MAX_BACKLOG_BYTES // 2 or self.failure is not None,
                timeout=STALL_MAX_S,
            )
        if self._pending_bytes <= MAX_BACKLOG_BYTES:
            return
        failure = self.failure
        cause = {"cause": failure.detail_code} if failure is not None else {}
        excess = self._pending_bytes - MAX_BACKLOG_BYTES // 2
        self._pending, lost = gaps.drop_oldest(self._pending, excess, **cause)
        self._pending_bytes = sum(len(row[2]) for row in self._pending)
        self.dropped += lost
        if lost:
            logger.warning(
                "journal: %d entries could not be stored in time (%d in all); a journal_gap"
                " record stands for them",
                lost,
                self.dropped,
            )

    def _take_carry(self) -> Carry | None:
        """From the thread: the row to write with this batch, if the owner has one."""
        carry = self.carry
        if carry is None:
            return None
        try:
            return carry()
        except Exception:  # the row is the owner's; never the journal's failure
            logger.exception("journal: the session row to carry could not be taken")
            return None

    def _tell(self) -> None:
        """From the thread: ``failure`` changed; run ``on_condition`` on the loop."""
        loop, callback = self._loop, self.on_condition
        if loop is None or callback is None:
            return
        try:
            loop.call_soon_threadsafe(callback)
        except RuntimeError:  # the loop is closed: the owner is gone
            pass

    def _kick(self) -> None:
        """Wake the writer (see ``BATCH_S``): at once, or as the batch's timer."""
        if self._kick_handle is not None:
            self._kick_handle.cancel()
            self._kick_handle = None
        self._wake.set()

    def will_commit(self) -> bool:
        """Whether entries wait for the thread's next commit (which carries what changed
        by then: ``carry``). Read without the lock: stale costs one write of the row."""
        return bool(self._pending) and not self._closing and self.failure is None

    @property
    def last_seq(self) -> int:
        return self.next_seq - 1

    def close(self, timeout: float = 5.0) -> bool:
        """Store what is queued and stop the thread; True if everything was stored.

        Blocking: call it from a thread (``asyncio.to_thread``) on a running loop.
        """
        self._closing = True
        self._wake.set()
        self._thread.join(timeout)
        done = not self._thread.is_alive() and not self._pending
        if done:
            try:
                store.release(self._db, self.key)
            except sqlite3.Error as exc:
                logger.warning("journal: could not release the reservation: %s", exc)
        if not self._thread.is_alive():
            from tether.state.registry import keep_if_lost

            if not keep_if_lost(self._db):  # a lost database is never checkpointed into
                self._db.close()
        return done

    def abandon(self, timeout: float = 5.0) -> int:
        """Stop the thread, storing nothing more and releasing nothing: another owner
        holds the session now (``lock-lost``), and its journal and reservation are its
        own. Returns how many entries were given up (the caller logs them).

        Blocking: call it from a thread (``asyncio.to_thread``) on a running loop.
        """
        with self._lock:
            self._abandoning = True
            self._closing = True
            self._abandoned += len(self._pending)
            self._pending, self._pending_bytes = [], 0
        self._wake.set()
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._db.close()
        return self._abandoned

    # --- the writer thread -----------------------------------------------------------

    def _run(self) -> None:
        delay = 0.05
        last_retention = 0.0
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                if self._abandoning:
                    self._abandoned += len(self._pending)
                    self._pending = []
                    return
                batch, self._pending = self._pending, []
                batch_bytes, self._pending_bytes = self._pending_bytes, 0
            if batch:
                carried = self._take_carry()
                try:
                    row = None if carried is None else (carried[0], carried[1])
                    written = self.commit(self._db, self.key, batch, row)
                except sqlite3.Error as exc:
                    if carried is not None:
                        carried[2](False)
                    logger.warning("journal write failed (%s); retrying", exc)
                    failed = self.failure is None
                    with self._lock:
                        self._pending[:0] = batch  # keep order: the failed batch goes first
                        self._pending_bytes += batch_bytes
                        error = translate_error(exc, self.db_path)
                        self.failure = error if isinstance(error, StateError) else None
                        self._drained.notify_all()  # a stalled appender stops waiting
                    self.stored_waits.failing()  # nobody's answer waits on a failing disk
                    if failed and self.failure is not None:
                        self._tell()
                    if self._closing and delay >= RETRY_MAX_S:
                        return  # give up at shutdown: the rows stay unstored, as on a crash
                    time.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX_S)
                    self._wake.set()
                    continue
                if carried is not None:
                    carried[2](written)
                delay = 0.05
                self.stored_seq = batch[-1][0]
                self.bytes_written += batch_bytes
                with self._lock:
                    self._drained.notify_all()
                self.stored_waits.reached(self.stored_seq)
                if self.failure is not None:
                    self.failure = None
                    self._tell()
            now = time.monotonic()
            with self._lock:
                finished = self._closing and not self._pending
            if finished or now - last_retention >= RETENTION_EVERY_S:
                last_retention = now
                try:
                    retention.apply_retention(self._db, self.key, self.retention)
                except sqlite3.Error as exc:
                    logger.warning("journal retention failed: %s", exc)
            if finished:
                return
            if self._closing:
                self._wake.set()
