"""The journal's storage in the state database: append, read, retain, prune.

Functions take a ``sqlite3.Connection`` (a :class:`tether.registry.Registry`'s, or the
writer thread's own), so the owner's writer thread, the owner's replay reads and the
CLI's readers share one implementation. Appends use ``BEGIN IMMEDIATE``: the batch and
the high-water mark (``journal_heads.last_seq``) commit together or not at all.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence

from tether.journal.entry import (
    TURN_KINDS,
    JournalStats,
    Retention,
    age_cutoff,
    body_of,
    bytes_over,
    entries_cut,
    entry_line,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# One stored entry: (seq, at, kind, request_id, body).
Row = tuple[int, float, str, "str | None", str]

READ_CHUNK = 5000  # rows per query when replaying: bounded memory, few round trips
# How far ahead of what is stored an owner may hand out seqs. The owner relays an entry
# to its watchers before the entry is stored; if it is killed then, those seqs were
# seen but never stored. The next owner starts past the reservation, so such a seq is
# never handed out twice: a crash leaves a gap, never a reused number.
RESERVE = 1 << 20


def last_seq(db: sqlite3.Connection, key: str) -> int:
    """The last ``seq`` ever stored for the session (0 if none)."""
    row = db.execute("SELECT last_seq FROM journal_heads WHERE session_key = ?", (key,)).fetchone()
    return int(row[0]) if row else 0


def claim(db: sqlite3.Connection, key: str) -> int:
    """Become the session's live writer: returns the first ``seq`` to hand out.

    That is past everything stored and everything a killed writer may have handed out
    (its reservation); a new reservation of :data:`RESERVE` seqs is stored before any
    is handed out. The caller holds the session lock.
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        row = db.execute(
            "SELECT last_seq, reserved FROM journal_heads WHERE session_key = ?", (key,)
        ).fetchone()
        last = max(int(row[0]), int(row[1])) if row else 0
        db.execute(
            "INSERT INTO journal_heads (session_key, last_seq, reserved) VALUES (?, ?, ?)"
            " ON CONFLICT (session_key) DO UPDATE SET last_seq = excluded.last_seq,"
            " reserved = excluded.reserved",
            (key, last, last + RESERVE),
        )
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return last + 1


def release(db: sqlite3.Connection, key: str) -> None:
    """A live writer stops cleanly: everything it handed out is stored, so the next one
    continues right after it, with no gap."""
    db.execute("UPDATE journal_heads SET reserved = last_seq WHERE session_key = ?", (key,))


def write_batch(db: sqlite3.Connection, key: str, rows: Sequence[Row]) -> None:
    """Store entries whose ``seq`` the writer assigned, in one transaction.

    The caller (the lock holder) guarantees the seqs continue the stored sequence.
    """
    if not rows:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        db.executemany(
            "INSERT INTO journal (session_key, seq, at, kind, request_id, body)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            [(key, *row) for row in rows],
        )
        db.execute(
            "INSERT INTO journal_heads (session_key, last_seq, reserved) VALUES (?, ?, ?)"
            " ON CONFLICT (session_key) DO UPDATE SET last_seq = excluded.last_seq,"
            " reserved = max(reserved, excluded.reserved)",
            (key, rows[-1][0], rows[-1][0] + RESERVE // 2),
        )
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def append_now(
    db: sqlite3.Connection,
    key: str,
    kind: str,
    payload: dict[str, Any],
    *,
    request_id: str | None = None,
) -> int:
    """Append one entry in a transaction of its own; returns its ``seq``.

    Only for a writer that holds the session's lock but runs no owner (an offline
    close): the owner hands out seqs in memory and must be the only one doing so.
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        row = db.execute(
            "SELECT last_seq, reserved FROM journal_heads WHERE session_key = ?", (key,)
        ).fetchone()
        seq = (max(int(row[0]), int(row[1])) if row else 0) + 1
        db.execute(
            "INSERT INTO journal (session_key, seq, at, kind, request_id, body)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (key, seq, time.time(), kind, request_id, body_of(payload)),
        )
        db.execute(
            "INSERT INTO journal_heads (session_key, last_seq, reserved) VALUES (?, ?, ?)"
            " ON CONFLICT (session_key) DO UPDATE SET last_seq = excluded.last_seq,"
            " reserved = excluded.reserved",
            (key, seq, seq),
        )
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return seq


def read(
    db: sqlite3.Connection, key: str, from_seq: int, *, upto: int | None = None, limit: int = 0
) -> list[Row]:
    """Entries with ``from_seq <= seq (<= upto)``, in order; at most ``limit`` (0: all)."""
    query = "SELECT seq, at, kind, request_id, body FROM journal WHERE session_key = ? AND seq >= ?"
    args: list[Any] = [key, from_seq]
    if upto is not None:
        query += " AND seq <= ?"
        args.append(upto)
    query += " ORDER BY seq"
    if limit > 0:
        query += " LIMIT ?"
        args.append(limit)
    return db.execute(query, args).fetchall()


def iter_lines(
    db: sqlite3.Connection, key: str, from_seq: int = 1, *, upto: int | None = None
) -> Iterator[tuple[int, str]]:
    """``(seq, public JSON line)`` for every stored entry from ``from_seq``, in chunks."""
    cursor = from_seq
    while True:
        rows = read(db, key, cursor, upto=upto, limit=READ_CHUNK)
        for seq, at, kind, rid, body in rows:
            yield seq, entry_line(seq, at, kind, rid, body)
        if len(rows) < READ_CHUNK:
            return
        cursor = rows[-1][0] + 1


def turn_rows(db: sqlite3.Connection, key: str) -> list[Row]:
    """The entries turn summaries are built from, in order (an indexed read)."""
    marks = ", ".join("?" for _ in TURN_KINDS)
    return db.execute(
        "SELECT seq, at, kind, request_id, body FROM journal"  # noqa: S608 -- placeholders only
        f" WHERE session_key = ? AND kind IN ({marks}) ORDER BY seq",
        (key, *TURN_KINDS),
    ).fetchall()


def turns_start(db: sqlite3.Connection, key: str, tail: int | None) -> int:
    """The first ``seq`` of the last ``tail`` turns (1 for all; past the end for 0)."""
    if tail is None:
        return 1
    if tail <= 0:
        return last_seq(db, key) + 1
    row = db.execute(
        "SELECT seq FROM journal WHERE session_key = ? AND kind = 'prompt_queued'"
        " ORDER BY seq DESC LIMIT 1 OFFSET ?",
        (key, tail - 1),
    ).fetchone()
    return int(row[0]) if row else 1


def stats(db: sqlite3.Connection, key: str) -> JournalStats:
    row = db.execute(
        "SELECT min(seq), count(*), coalesce(sum(length(body)), 0), min(at)"
        " FROM journal WHERE session_key = ?",
        (key,),
    ).fetchone()
    return JournalStats(
        first_seq=row[0],
        last_seq=last_seq(db, key),
        entries=int(row[1]),
        bytes=int(row[2]),
        oldest_at=row[3],
    )


def delete_before(db: sqlite3.Connection, key: str, seq: int) -> int:
    """Delete the session's entries with ``seq`` below ``seq``; returns how many."""
    cur = db.execute("DELETE FROM journal WHERE session_key = ? AND seq < ?", (key, seq))
    return int(cur.rowcount)


def _bytes_cut(db: sqlite3.Connection, key: str, excess: int) -> int | None:
    """The first ``seq`` to keep once ``excess`` bytes of the oldest entries are gone."""
    removed = 0
    cursor = 0
    while True:
        rows = db.execute(
            "SELECT seq, length(body) FROM journal WHERE session_key = ? AND seq > ?"
            " ORDER BY seq LIMIT ?",
            (key, cursor, READ_CHUNK),
        ).fetchall()
        if not rows:
            return None
        for seq, size in rows:
            if removed >= excess:
                return int(seq)
            removed += int(size)
        cursor = rows[-1][0]


def apply_retention(
    db: sqlite3.Connection, key: str, retention: Retention, *, now: float | None = None
) -> int:
    """Enforce the bounds on one session's journal; returns how many entries went.

    The high-water mark is untouched, so sequence numbers are never reused.
    """
    current = stats(db, key)
    if current.entries == 0:
        return 0
    cut = entries_cut(current, retention) or 0
    excess = bytes_over(current, retention)
    if excess:
        cut = max(cut, _bytes_cut(db, key, excess) or 0)
    cutoff = age_cutoff(time.time() if now is None else now, retention)
    if cutoff is not None and current.oldest_at is not None and current.oldest_at < cutoff:
        row = db.execute(
            "SELECT min(seq) FROM journal WHERE session_key = ? AND at >= ?", (key, cutoff)
        ).fetchone()
        cut = max(cut, int(row[0]) if row[0] is not None else current.last_seq + 1)
    if not cut:
        return 0
    db.execute("BEGIN IMMEDIATE")
    try:
        removed = delete_before(db, key, cut)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return removed


def forget_session(db: sqlite3.Connection, keys: Iterable[str]) -> None:
    """Delete the journals (entries and high-water marks) of sessions being removed.

    Runs inside the caller's transaction.
    """
    for key in keys:
        db.execute("DELETE FROM journal WHERE session_key = ?", (key,))
        db.execute("DELETE FROM journal_heads WHERE session_key = ?", (key,))
