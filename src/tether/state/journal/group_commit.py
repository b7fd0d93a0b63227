"""Group commit: the journal batches of a session host's owners, many in one transaction.

Each owner in a host has its own journal writer thread, and a turn's answer waits for
its end to be stored (:mod:`.stored_waits`). Committed one by one, a burst of a hundred
turns in a host was a hundred transactions in a row in one process. Here a writer
queues its batch, then takes the host's lock: whoever gets it commits everything queued
by then -- its own batch and those of every writer waiting behind it -- in one
transaction, each under a savepoint of its own, so one session's refused batch never
costs another its entries. A writer that gets the lock and finds its batch done returns
at once. Each batch keeps :func:`.store.write_batch`'s contract: stored whole or not at
all, its session row with it, the error that refused it raised to its own writer.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Sequence

from tether.state.journal import store

__all__ = ["GroupCommit"]


class _Batch:
    __slots__ = ("done", "error", "items", "key", "row", "written")

    def __init__(
        self, key: str, items: Sequence[store.Stored], row: store.SessionRow | None
    ) -> None:
        self.key, self.items, self.row = key, items, row
        self.done = False
        self.written = False
        self.error: BaseException | None = None


class GroupCommit:
    """One per session host: its owners' writers commit through :meth:`write_batch`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # held by the writer committing a group
        self._queue_lock = threading.Lock()
        self._queue: list[_Batch] = []

    def write_batch(
        self,
        db: sqlite3.Connection,
        key: str,
        items: Sequence[store.Stored],
        session_row: store.SessionRow | None = None,
    ) -> bool:
        """:func:`.store.write_batch`, in whatever group commits it (``db``: the caller's
        connection, used if the caller is the one to commit)."""
        if not items:
            return False
        batch = _Batch(key, items, session_row)
        with self._queue_lock:
            self._queue.append(batch)
        with self._lock:
            if not batch.done:  # nobody took it: we commit everything queued by now
                with self._queue_lock:
                    group, self._queue = self._queue, []
                _commit(db, group)
        if batch.error is not None:
            raise batch.error
        return batch.written


def _commit(db: sqlite3.Connection, group: list[_Batch]) -> None:
    """Store ``group`` in one transaction; every batch ends done, written or refused."""
    committed = False
    try:
        db.execute("BEGIN IMMEDIATE")
        for batch in group:
            db.execute("SAVEPOINT batch")
            try:
                batch.written = store.write_into(db, batch.key, batch.items, batch.row)
            except Exception as exc:  # this batch's own refusal (its seqs, its row's text)
                db.execute("ROLLBACK TO batch")
                batch.error = exc
            db.execute("RELEASE batch")
        db.execute("COMMIT")
        committed = True
    except sqlite3.Error as exc:  # the transaction failed (a full disk, a lock timeout)
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        for batch in group:
            batch.written = False
            if batch.error is None:
                batch.error = exc
    finally:
        for batch in group:
            if not committed and batch.error is None:  # never "stored" unless it was
                batch.written = False
                batch.error = sqlite3.OperationalError("the group commit did not finish")
            batch.done = True
