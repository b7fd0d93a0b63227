"""Damaged journal chunks: finding every one, and setting one aside (``tether doctor``).

Readers skip a damaged chunk as they meet it (:func:`tether.state.journal.store.read`); this
is the doctor's side: a pass over every chunk of every session with every line decoded,
and the removal of a chunk whose stored bytes the doctor has saved elsewhere.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from tether.state.journal.chunks import decode
from tether.state.journal.store import Damage


def damaged_chunks(db: sqlite3.Connection) -> Iterator[tuple[str, Damage]]:
    """``(session key, damage)`` for every damaged chunk of every session, every line
    decoded (the doctor's pass: slower than a reader's check)."""
    cursor = db.execute(
        "SELECT session_key, first_seq, last_seq, entries, codec,"
        " CAST(data AS BLOB) FROM journal_chunks"
        " ORDER BY session_key, first_seq"
    )
    try:
        for key, first, last, entries, codec, data in cursor:
            _lines, damage = decode(codec, data, first, last, entries, full=True)
            if damage is not None:
                yield str(key), (int(first), int(last), damage)
    finally:
        cursor.close()


def take_chunk(db: sqlite3.Connection, key: str, first_seq: int) -> None:
    """Remove one stored chunk (its bytes saved elsewhere first: the doctor's set-aside).

    The marks of its control records stay (turn summaries keep working), and the
    high-water mark is untouched, so its seqs are never handed out again.
    """
    db.execute(
        "DELETE FROM journal_chunks WHERE session_key = ? AND first_seq = ?", (key, first_seq)
    )


def stored_chunk(db: sqlite3.Connection, key: str, first_seq: int) -> tuple[int, bytes] | None:
    """One chunk's ``(codec, stored bytes)``, as stored (None: it is gone)."""
    row = db.execute(
        "SELECT codec, CAST(data AS BLOB) FROM journal_chunks"
        " WHERE session_key = ? AND first_seq = ?",
        (key, first_seq),
    ).fetchone()
    return None if row is None else (int(row[0]), bytes(row[1]))
