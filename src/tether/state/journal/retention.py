"""Journal retention: cut a session's oldest entries by count, stored bytes or age.

A cut deletes whole chunks and rewrites the one it falls inside with the entries it
keeps; what went is replaced by one ``journal_gap`` record (``retention``) so readers see
where the journal starts and why (:mod:`tether.state.journal.gaps`). The high-water mark
(``journal_heads.last_seq``) is never touched, so sequence numbers are never reused.
Split from :mod:`tether.state.journal.store`, whose append and read halves it uses.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable

from tether.state.journal import gaps
from tether.state.journal.chunks import at_of, decode, pack, seq_of
from tether.state.journal.entry import Retention, age_cutoff, bytes_over, entries_over, parse_line
from tether.state.journal.store import insert_items, last_seq, stats


def delete_before(db: sqlite3.Connection, key: str, seq: int) -> int:
    """Delete the session's entries with ``seq`` below ``seq``; returns how many.

    Whole chunks go; a chunk the cut falls inside is rewritten with the entries it keeps.
    What went is replaced by one ``journal_gap`` record (``retention``) at the last seq
    that went, so a reader sees where the journal starts and why (:mod:`.gaps`).
    Runs inside the caller's transaction.
    """
    rows = db.execute(
        "SELECT first_seq, last_seq, entries, last_at, codec, CAST(data AS BLOB)"
        " FROM journal_chunks"
        " WHERE session_key = ? AND first_seq < ? ORDER BY first_seq",
        (key, seq),
    ).fetchall()
    if not rows:
        return 0
    head = _head_gap(db, key, int(rows[0][0]))
    if head is not None and int(rows[0][0]) == seq - 1:
        return 0  # only the gap record of an earlier cut is older: nothing to do
    removed = 0
    last_gone = (0, 0.0)
    for first, last, entries, last_at, codec, data in rows:
        db.execute(
            "DELETE FROM journal_chunks WHERE session_key = ? AND first_seq = ?", (key, first)
        )
        lines, damage = decode(codec, data, first, last, entries)
        if last < seq or damage is not None:  # a damaged chunk cannot be cut: it goes whole
            removed += int(entries)
            last_gone = max(last_gone, (int(last), float(last_at)))
            continue
        keep = [line for line in lines if seq_of(line) >= seq]
        gone = lines[: len(lines) - len(keep)]
        removed += len(gone)
        if gone:
            last_gone = max(last_gone, (seq_of(gone[-1]), at_of(gone[-1])))
        if keep:
            db.execute(
                "INSERT INTO journal_chunks"
                " (session_key, first_seq, last_seq, entries, last_at, codec, data)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key, seq_of(keep[0]), last, len(keep), last_at, *pack(keep)),
            )
    # A damaged chunk went whole, past the cut: its marks go with it.
    below = max(seq, last_gone[0] + 1)
    db.execute("DELETE FROM journal_marks WHERE session_key = ? AND seq < ?", (key, below))
    if removed:
        after, counted = int(rows[0][0]) - 1, removed
        if head is not None:  # the earlier cut's record stood for entries of its own
            after, counted = head[0], removed - 1 + head[1]
        insert_items(db, key, [gaps.gap_item(*last_gone, after, gaps.RETENTION, counted)])
    return removed


def _head_gap(db: sqlite3.Connection, key: str, seq: int) -> tuple[int, int] | None:
    """(after, entries) of the retention gap record at ``seq``, if that is one."""
    row = db.execute(
        "SELECT body FROM journal_marks WHERE session_key = ? AND seq = ? AND kind = ?",
        (key, seq, gaps.GAP_KIND),
    ).fetchone()
    if row is None:
        return None
    body = parse_line(str(row[0]))
    if body.get("reason") != gaps.RETENTION or not isinstance(body.get("after"), int):
        return None
    entries = body.get("entries")
    return int(body["after"]), int(entries) if isinstance(entries, int) else 1


def _count_cut(db: sqlite3.Connection, key: str, count: int) -> int | None:
    """The first ``seq`` to keep once the ``count`` oldest entries are gone (counted as
    entries, not seqs: a journal with holes has fewer entries than seqs)."""
    removed = 0
    for first, last, entries in db.execute(
        "SELECT first_seq, last_seq, entries FROM journal_chunks"
        " WHERE session_key = ? ORDER BY first_seq",
        (key,),
    ).fetchall():
        if removed + int(entries) < count:
            removed += int(entries)
            continue
        if removed + int(entries) == count:
            return int(last) + 1
        codec, data = db.execute(
            "SELECT codec, CAST(data AS BLOB) FROM journal_chunks"
            " WHERE session_key = ? AND first_seq = ?",
            (key, first),
        ).fetchone()
        lines, damage = decode(codec, data, int(first), int(last), int(entries))
        if damage is not None:
            return int(last) + 1  # a damaged chunk cannot be cut inside: it goes whole
        return seq_of(lines[count - removed])
    return None


def _bytes_cut(db: sqlite3.Connection, key: str, excess: int) -> int | None:
    """The first ``seq`` to keep once at least ``excess`` stored bytes of the oldest
    chunks are gone (whole chunks: their stored size is what the bound counts)."""
    removed = 0
    for last, size in db.execute(
        "SELECT last_seq, length(data) FROM journal_chunks WHERE session_key = ?"
        " ORDER BY first_seq",
        (key,),
    ):
        removed += int(size)
        if removed >= excess:
            return int(last) + 1
    return None


def _age_cut(db: sqlite3.Connection, key: str, cutoff: float) -> int | None:
    """The first ``seq`` written at or after ``cutoff`` (None: every entry is older)."""
    row = db.execute(
        "SELECT first_seq, last_seq, entries, codec, CAST(data AS BLOB) FROM journal_chunks"
        " WHERE session_key = ? AND last_at >= ? ORDER BY first_seq LIMIT 1",
        (key, cutoff),
    ).fetchone()
    if row is None:
        return None
    lines, damage = decode(row[3], row[4], row[0], row[1], row[2])
    if damage is not None:
        return int(row[0])  # its times cannot be read: kept whole, as its newest is kept
    for line in lines:
        if at_of(line) >= cutoff:
            return seq_of(line)
    return None  # pragma: no cover - last_at >= cutoff means some line qualifies


def drop_older(db: sqlite3.Connection, key: str, cutoff: float) -> int:
    """Delete the session's entries written before ``cutoff`` (caller's transaction)."""
    cut = _age_cut(db, key, cutoff)
    return delete_before(db, key, last_seq(db, key) + 1 if cut is None else cut)


def apply_retention(
    db: sqlite3.Connection, key: str, retention: Retention, *, now: float | None = None
) -> int:
    """Enforce the bounds on one session's journal; returns how many entries went.

    The high-water mark is untouched, so sequence numbers are never reused.
    """
    current = stats(db, key)
    if current.entries == 0:
        return 0
    over = entries_over(current, retention)
    cut = (_count_cut(db, key, over) or 0) if over else 0
    excess = bytes_over(current, retention)
    if excess:
        cut = max(cut, _bytes_cut(db, key, excess) or 0)
    cutoff = age_cutoff(time.time() if now is None else now, retention)
    if cutoff is not None and current.oldest_at is not None and current.oldest_at < cutoff:
        age = _age_cut(db, key, cutoff)
        cut = max(cut, current.last_seq + 1 if age is None else age)
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
        db.execute("DELETE FROM journal_chunks WHERE session_key = ?", (key,))
        db.execute("DELETE FROM journal_marks WHERE session_key = ?", (key,))
        db.execute("DELETE FROM journal_heads WHERE session_key = ?", (key,))
