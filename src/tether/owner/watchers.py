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
3. *Live.* Each entry goes through the watcher's connection :class:`~.job.Outbox`,
   flushed once per loop pass. A watcher never slows the turn: when its unsent bytes
   pass the outbox's bound it gets a terminal ``lagged`` frame carrying the last
   ``seq`` it was given and is dropped; it resumes from the journal at ``lastSeq + 1``.

The session's end and the owner's retirement end every watch with a terminal
``result`` naming why (``session-ended`` / ``owner-stopped``) and the last ``seq``.
"""

from __future__ import annotations

import asyncio

from tether._registry_journal import JournalReader
from tether.ipc import protocol
from tether.journal.entry import FRAME_END, entry_frame_prefix
from tether.journal.writer import JournalWriter
from tether.owner.job import Job

__all__ = ["Fanout", "Watch"]


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
        prefix = self._prefix
        self.job.outbox.write(prefix + (FRAME_END + prefix).join(lines) + FRAME_END)
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
        # Entries of this loop pass, handed to every watcher together at its end: a
        # streamed turn journals many per pass, and per entry per watcher the Python
        # work was most of what watching cost the owner.
        self._run: list[bytes] = []
        self._run_first = 0
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
            asyncio.get_running_loop().call_soon(self._flush)
        run.append(line)

    def _flush(self) -> None:
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
                    for seq, line in tuple(ring):
                        watch.deliver(seq, line)
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
                watch.job.outbox.write(b"".join(watch.frame(line) for _seq, line in rows))
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
