"""The session's journal while this owner writes it, and the watchers that follow it.

:class:`Journaling` is the one owner of the owner's journal writer
(:class:`~tether.state.journal.writer.JournalWriter`: opened once the session lock is
ours, closed before it is released, so the next owner continues the sequence from the
right place) and of the :class:`~tether.owner.watchers.Fanout` that feeds ``watch``
callers from it. Before the journal is open, and after it is
closed, a record is dropped (its seq is 0).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tether.errors import OwnerShuttingDown
from tether.owner.lifecycle import StopReason
from tether.owner.watchers import Fanout, Watch
from tether.state.journal.writer import JournalWriter

if TYPE_CHECKING:
    from tether.owner.job import Job, Outbox
    from tether.owner.questions import Questions
    from tether.state.journal.entry import Retention

__all__ = ["Journaling"]

logger = logging.getLogger("tether.owner")


class Journaling:
    """The journal this owner writes (``writer``) and its watchers (``fanout``)."""

    def __init__(self, db_path: str, key: str) -> None:
        self._db_path = db_path
        self._key = key
        self.writer: JournalWriter | None = None  # None: not open yet, or closed
        self.fanout: Fanout | None = None

    def open(self, retention: Retention, on_condition: Callable[[], None]) -> JournalWriter:
        """Become the journal's writer (the caller holds the session lock)."""
        writer = JournalWriter(self._db_path, self._key, retention=retention)
        self.writer = writer
        writer.on_condition = on_condition  # a full disk, and after
        self.fanout = Fanout(writer)
        return writer

    def record(self, kind: str, payload: dict[str, Any], request_id: str | None = None) -> int:
        """Journal one control record; returns its seq (0 while the journal is not open)."""
        if self.writer is None:
            return 0
        return self.writer.append(kind, payload, request_id)

    def shrink(self) -> None:
        if self.writer is not None:
            self.writer.shrink()

    def watching(self) -> set[Outbox]:
        """The connections that only follow the journal."""
        return {w.job.outbox for w in self.fanout.watches} if self.fanout else set()

    async def watch(self, job: Job, questions: Questions) -> None:
        """Serve one ``watch`` request: replay from its cursor, then follow (if asked)."""
        if self.fanout is None or self.writer is None:  # closed meanwhile
            job.finish(error=OwnerShuttingDown("the owner is shutting down"))
            return
        start = job.env.payload.get("fromSeq")
        cursor = start if isinstance(start, int) and start > 0 else self.writer.next_seq
        follow = job.env.payload.get("follow", True) is not False
        if job.env.payload.get("control") is True and follow:
            questions.attach(job)  # offered every open question, then new ones
        await self.fanout.attach(Watch(job), cursor, follow=follow)

    async def close(self, *, session_ended: bool, stop_reason: str) -> None:
        """The session's end or the owner's retirement: tell every watcher, store it all.

        The journal is stored before the lock is released, so the next owner continues
        the sequence from the right place.
        """
        if self.writer is None or self.fanout is None:
            return
        if stop_reason == StopReason.LOCK_LOST:
            # Another owner holds the session now: its journal is not ours to write.
            self.fanout.end_all("owner-stopped")
            writer, self.writer = self.writer, None
            given_up = await asyncio.to_thread(writer.abandon)
            logger.error(
                "journal: another owner took the session; %d unstored entries given up"
                " (seqs after %d)",
                given_up,
                writer.stored_seq,
            )
            return
        if session_ended:
            self.fanout.end_all("session-ended")  # its session_ended is journaled already
        else:
            self.record("owner_stopped", {"reason": stop_reason})
            self.fanout.end_all("owner-stopped")
        writer, self.writer = self.writer, None
        if not await asyncio.to_thread(writer.close):
            logger.warning("journal: the last batch could not be stored before exit")
