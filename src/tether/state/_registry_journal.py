"""The state layer's journal API: what callers outside it do with a session's journal.

:class:`JournalReads` is a part of :class:`tether.state.registry.Registry` (and of
:class:`JournalReader`, a connection for the journal's worker threads): reading entries
and lines from a seq, the last seq, the rows turn summaries are built from, where the
current incarnation and the last turns start. :class:`JournalAppends` adds what a
writer that runs no owner does -- one entry appended in a transaction of its own, by
whoever holds the session's lock -- and the doctor's set-aside of a damaged chunk.

Beneath them is :mod:`tether.state.journal.store` (and :mod:`tether.state.journal.damage`), which
take a ``sqlite3.Connection``; nothing outside the state layer holds one. Errors are
what the store raises, unchanged (as when callers reached the connection themselves).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterator
from typing import Any

from tether.state.journal import store

__all__ = ["JournalAppends", "JournalReader", "JournalReads"]

# One control record as ``journal_marks`` holds it: (seq, kind, request_id, body).
MarkRow = tuple[int, str, "str | None", str]


class JournalReads:
    """Reading a session's journal; needs no owner (WAL readers never wait on it)."""

    _db: sqlite3.Connection

    def journal_last_seq(self, key: str) -> int:
        """The last ``seq`` ever stored for the session (0 if none)."""
        return store.last_seq(self._db, key)

    def journal_read(
        self,
        key: str,
        from_seq: int,
        *,
        upto: int | None = None,
        limit: int = store.READ_CHUNK,
        on_damage: store.OnDamage | None = None,
    ) -> list[tuple[int, bytes]]:
        """``(seq, public line as UTF-8)`` from ``from_seq`` (to ``upto``), at most
        ``limit`` (0: all); damaged chunks skipped and told (:func:`store.read`)."""
        return store.read(self._db, key, from_seq, upto=upto, limit=limit, on_damage=on_damage)

    def journal_lines(
        self, key: str, from_seq: int = 1, *, on_damage: store.OnDamage | None = None
    ) -> Iterator[tuple[int, str]]:
        """``(seq, public JSON line)`` for every stored entry from ``from_seq``, read in
        bounded chunks (:func:`store.iter_lines`)."""
        return store.iter_lines(self._db, key, from_seq, on_damage=on_damage)

    def journal_turn_rows(self, key: str) -> list[store.Row]:
        """The control records turn summaries are built from, in order."""
        return store.turn_rows(self._db, key)

    def journal_turns_start(self, key: str, tail: int | None) -> int:
        """The first ``seq`` of the last ``tail`` turns (1 for all; past the end for 0)."""
        return store.turns_start(self._db, key, tail)

    def journal_incarnation_start(self, key: str, created_at: float) -> int:
        """The first ``seq`` of the session created at ``created_at`` (an earlier session
        of the same key ended before it): :func:`store.incarnation_start`."""
        return store.incarnation_start(self._db, key, created_at)

    def journal_last_of_kind(self, key: str, kind: str) -> store.Row | None:
        """The session's newest control record of ``kind`` (e.g. ``session_ended``)."""
        return store.last_of_kind(self._db, key, kind)

    def journal_unreleased(self, key: str) -> int | None:
        """A lost writer's reservation left unreleased (None: released)."""
        return store.unreleased(self._db, key)

    def journal_marks(
        self, key: str, kinds: Collection[str], *, before: int | None = None
    ) -> list[MarkRow]:
        """The session's control records of ``kinds`` below ``before`` (all: None), in
        order: ``(seq, kind, request_id, body)``."""
        marks = ", ".join("?" for _ in kinds)
        rows: list[MarkRow] = self._db.execute(
            "SELECT seq, kind, request_id, body FROM journal_marks"  # noqa: S608 -- placeholders only
            f" WHERE session_key = ? AND seq < ? AND kind IN ({marks}) ORDER BY seq",
            (key, before if before is not None else 1 << 62, *kinds),
        ).fetchall()
        return rows


class JournalAppends(JournalReads):
    """Writes by a writer that runs no owner: the caller holds the session's lock."""

    def journal_append(
        self, key: str, kind: str, payload: dict[str, Any], *, request_id: str | None = None
    ) -> int:
        """Append one entry in a transaction of its own; returns its ``seq``.

        Only under the session's lock, with no owner running (an offline close, a fence):
        an owner hands out seqs in memory and must be the only one doing so.
        """
        return store.append_now(self._db, key, kind, payload, request_id=request_id)

    def journal_stored_chunk(self, key: str, first_seq: int) -> tuple[int, bytes] | None:
        """One stored chunk's ``(codec, bytes)`` as stored (None: it is gone)."""
        from tether.state.journal.damage import stored_chunk

        return stored_chunk(self._db, key, first_seq)

    def journal_take_chunk(self, key: str, first_seq: int) -> None:
        """Remove one stored chunk whose bytes were saved elsewhere (the doctor's
        set-aside); its seqs are never handed out again."""
        from tether.state.journal.damage import take_chunk

        take_chunk(self._db, key, first_seq)


class JournalReader(JournalReads):
    """A journal-reading connection that may move between threads (an owner's replay
    reads, the fleet's shipper): :func:`tether.state.journal.db.open_db`'s."""

    def __init__(self, path: str) -> None:
        from tether.state.journal.db import open_db

        self._db = open_db(path)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> JournalReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
