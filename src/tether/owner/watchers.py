"""The owner's room for attached parties: watchers of the session's journal.

Theory of operation
-------------------
A watcher is an IPC ``watch`` request. It names a cursor (the first ``seq`` it wants);
the owner answers with the entries from there on, then every new entry the moment it
is journaled, in ``seq`` order, with no gap and no duplicate:

1. *Replay.* While the cursor is older than the journal writer's in-memory ring,
   entries come from the database in chunks (read in a thread; the owner's loop never
   blocks on it), each chunk written with back-pressure (``drain``): a slow replay
   slows only itself.
2. *Switch to live.* Once the cursor is inside the ring, the rest of the ring is sent
   and the watcher joins the listeners -- in one step of the event loop, so no entry
   can fall between the two.
3. *Live.* Each entry goes through the watcher's connection :class:`~.job.Outbox`:
   a turn's end (and any record but a prompt's queueing, start and frames) at the end
   of its loop pass, with everything before it; a turn's first frames at most
   ``WATCH_BATCH_S`` later, with its next entries (a short turn is one write); a turn
   that streams on past that, once per loop pass. A watcher never slows the turn: when
   its unsent bytes pass the outbox's bound it gets a terminal ``lagged`` frame
   carrying the last ``seq`` it was given and is dropped; it resumes from the journal
   at ``lastSeq + 1``.

The session's end and the owner's retirement end every watch with a terminal
``result`` naming why (``session-ended`` / ``owner-stopped``) and the last ``seq``.
"""

from __future__ import annotations

import asyncio

from tether.ipc import protocol
from tether.owner.job import Job
from tether.state.journal.entry import FRAME_END, entry_frame_prefix
from tether.state.journal.writer import BATCHED_KINDS, JournalWriter
from tether.state.registry import JournalReader

__all__ = ["Fanout", "Watch"]

# How long a turn's frames may wait for company before they go to the watchers. A warm
# turn journals its entries (queued, started, its frames, ended) over several loop
# passes within about a millisecond; handed over once per pass, each was a write to
# every watcher and a wakeup of each follower (a gateway's SSE hub: ~3 per turn). Its
# end -- any record but these kinds -- goes at the end of its pass, with everything
# before it: so a warm turn is one write. A turn still running when its window is over
# streams: its frames go once per pass again (batching a stream's frames longer cost
# three watchers a tenth of its rate), until its end. So a frame reaches a watcher at
# most WATCH_BATCH_S later than it did. The same kinds the journal writer batches.
WATCH_BATCH_S = 0.002
_ACP = b'"kind":"acp"'  # looked for first: a stream's entries are frames
_MAY_WAIT = tuple(b'"kind":"' + k.encode() + b'"' for k in sorted(BATCHED_KINDS - {"acp"}))
_KIND_WITHIN = 96  # an entry's kind follows its seq and time: {"seq":N,"at":T,"kind":…


class Watch:
    """One attached watcher: a ``watch`` request's job, and where it has got to."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.cursor = 1  # the next seq this watcher is to get
        self.ended = False
        self._prefix = entry_frame_prefix(job.request_id)
        job.outbox.lag_handlers.append(self._on_lagged)

    def frame(self, line: bytes) -> bytes:
        return self._prefix + line + FRAME_END

    def frames(self, lines: list[bytes]) -> bytes:
        """The frames of ``lines``, joined: one join, not a frame built per entry."""
        prefix = self._prefix
        return prefix + (FRAME_END + prefix).join(lines) + FRAME_END

    def deliver(self, seq: int, line: bytes) -> None:
        if seq < self.cursor or self.ended:
            return
        self.job.outbox.write(self.frame(line))
        self.cursor = seq + 1

    def deliver_run(self, first: int, last: int, lines: list[bytes]) -> None:
        """Entries ``first..last`` (consecutive), as one write: one join, not a frame
        and a queued write per entry."""
        if self.ended or last < self.cursor:
            return
        if first < self.cursor:
            lines = lines[self.cursor - first :]
        self.job.outbox.write(self.frames(lines))
        self.cursor = last + 1

    def _on_lagged(self) -> bytes | None:
        if self.ended:
            return None
        self.ended = self.job.done = True
        return protocol.encode(
            {"type": "lagged", "requestId": self.job.request_id, "lastSeq": self.cursor - 1}
        )

    def end(self, reason: str) -> None:
        """End this watch with its one terminal ``result`` (later calls are ignored)."""
        if self.ended:
            return
        self.ended = True
        self.job.finish({"action": "watch_ended", "reason": reason, "lastSeq": self.cursor - 1})


class Fanout:
    """Every watcher of one session, fed by its :class:`JournalWriter`."""

    def __init__(self, journal: JournalWriter) -> None:
        self.journal = journal
        self.watches: set[Watch] = set()
        # Entries not yet handed to the watchers, handed to every watcher together: a
        # streamed turn journals many per pass, and per entry per watcher the Python
        # work was most of what watching cost the owner.
        self._run: list[bytes] = []
        self._run_first = 0
        self._soon = False  # handed over at the end of this loop pass
        self._timer: asyncio.TimerHandle | None = None  # or WATCH_BATCH_S after the first
        self._streaming = False  # this turn outlived its window: once per pass again
        journal.listeners.append(self._on_entry)

    def _on_entry(self, seq: int, line: bytes) -> None:
        if not self.watches:
            return
        run = self._run
        if run and seq != self._run_first + len(run):
            self._flush()  # not consecutive (never, with one writer): keep them apart
            run = self._run
        if not run:
            self._run_first = seq
        run.append(line)
        if self._soon:
            return
        loop = asyncio.get_running_loop()
        may_wait = line.find(_ACP, 0, _KIND_WITHIN) > 0 or any(
            line.find(kind, 0, _KIND_WITHIN) > 0 for kind in _MAY_WAIT
        )
        if may_wait and not self._streaming:
            if self._timer is None:
                self._timer = loop.call_later(WATCH_BATCH_S, self._window_over)
            return
        if not may_wait:
            self._streaming = False  # a turn's end (or any record): the next turn waits again
        self._soon = True  # at the end of this pass
        loop.call_soon(self._flush)

    def _window_over(self) -> None:
        """The turn outlived its window: it streams, so its frames go once per pass (as
        they come: a stream's watchers keep its pace), until its end."""
        self._timer = None
        self._streaming = True
        self._flush()

    def _flush(self) -> None:
        self._soon = False
        if self._timer is not None:
            self._timer.cancel()  # (harmless when it is the timer that fired)
            self._timer = None
        run, self._run = self._run, []
        if not run:
            return
        first = self._run_first
        last = first + len(run) - 1
        for watch in tuple(self.watches):
            if watch.ended or watch.job.outbox.detached:
                self.watches.discard(watch)  # lagged, or the watcher left
            else:
                watch.deliver_run(first, last, run)

    async def attach(self, watch: Watch, from_seq: int, *, follow: bool) -> None:
        """Replay from ``from_seq``, then (``follow``) go live; see the module docstring."""
        watch.cursor = max(1, from_seq)
        journal = self.journal
        reader: JournalReader | None = None
        try:
            while not watch.ended and not watch.job.outbox.detached:
                ring = journal.ring
                first = ring[0][0] if ring else journal.next_seq
                if watch.cursor >= first:
                    # Inside the ring: finish synchronously, then join the listeners, with
                    # no await in between, so no entry falls between replay and live.
                    _replay_ring(watch, tuple(ring))
                    watch.cursor = max(watch.cursor, journal.next_seq)
                    if follow:
                        self.watches.add(watch)
                    else:
                        watch.end("caught-up")
                    return
                if reader is None:
                    reader = await asyncio.to_thread(JournalReader, journal.db_path)
                rows = await asyncio.to_thread(
                    reader.journal_read, journal.key, watch.cursor, upto=first - 1
                )
                if not rows:
                    watch.cursor = first  # retention removed them: the seq jump shows it
                    continue
                watch.job.outbox.write(watch.frames([line for _seq, line in rows]))
                watch.cursor = rows[-1][0] + 1
                await watch.job.outbox.drain(timeout=30.0)
        finally:
            if reader is not None:
                await asyncio.to_thread(reader.close)

    def end_all(self, reason: str) -> None:
        """The session ended or the owner retires: every watch gets its terminal frame."""
        self._flush()  # the entries of this pass (the session's end among them) first
        for watch in tuple(self.watches):
            watch.end(reason)
        self.watches.clear()


def _replay_ring(watch: Watch, ring: tuple[tuple[int, bytes], ...]) -> None:
    """The ring's entries from the watch's cursor on, as one write (issue 23: a watcher
    attaching mid-stream replays thousands of them, and a frame and an outbox write
    per entry was the owner's loop's time taken from the turn being streamed)."""
    if not ring:
        return
    first, last = ring[0][0], ring[-1][0]
    if last - first + 1 == len(ring):  # consecutive: one writer, so always
        watch.deliver_run(first, last, [line for _seq, line in ring])
        return
    for seq, line in ring:
        watch.deliver(seq, line)
