"""The journal's storage in the state database: append and read (retention and
forgetting a session's journal: :mod:`tether.state.journal.retention`).

Functions take a ``sqlite3.Connection`` (a :class:`tether.state.registry.Registry`'s, or the
writer thread's own), so the owner's writer thread, the owner's replay reads and the
CLI's readers share one implementation. Appends use ``BEGIN IMMEDIATE``: the batch and
the high-water mark (``journal_heads.last_seq``) commit together or not at all.

Entries are stored in *chunks*: one row holds a run of consecutive entries' public
lines (what readers send on unchanged), zlib-compressed when it is large. A streamed
turn of 10,000 updates is a few dozen rows, not 10,000: the writer thread's cost per
entry is a ``join`` and a share of one insert, and it holds the GIL for almost none of
it (zlib and SQLite release it), so the owner's loop relaying the turn is not slowed.
Control records (every kind but ``acp``) are also stored one per row in
``journal_marks``, which turn summaries and "how did it end" read by index.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence

from tether.state.journal import gaps
from tether.state.journal.chunks import at_of, chunks, decode, pack, seq_of
from tether.state.journal.entry import (
    TURN_KINDS,
    JournalStats,
    body_of,
    entry_line,
)
from tether.state.session_fields import write_session_fields

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from tether.metrics import MetricOp

    # A session row to write with a batch: (its changed columns, kept metric changes).
    SessionRow = tuple[dict[str, Any], list[MetricOp]]

# A control record's indexed columns: (kind, request_id, body).
Mark = tuple[str, "str | None", str]
# One entry as the writer stores it: (seq, at, public line as UTF-8, mark or None).
Stored = tuple[int, float, bytes, "Mark | None"]
# One control record read back: (seq, at, kind, request_id, body).
Row = tuple[int, float, str, "str | None", str]
# A damaged chunk a reader skipped: (first seq, last seq, why), and who is told of it.
Damage = tuple[int, int, str]
OnDamage = Callable[[Damage], None]

READ_CHUNK = 5000  # entries per read when replaying: bounded memory, few round trips
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


def unreleased(db: sqlite3.Connection, key: str) -> int | None:
    """The last stored seq if the session's previous writer never released its
    reservation (it was lost: killed, crashed), else None. Read it before
    :func:`claim`; the caller holds the session lock."""
    row = db.execute(
        "SELECT last_seq, reserved FROM journal_heads WHERE session_key = ?", (key,)
    ).fetchone()
    if row is None or int(row[1]) <= int(row[0]):
        return None
    return int(row[0])


def release(db: sqlite3.Connection, key: str) -> None:
    """A live writer stops cleanly: everything it handed out is stored, so the next one
    continues right after it, with no gap."""
    db.execute("UPDATE journal_heads SET reserved = last_seq WHERE session_key = ?", (key,))


def insert_items(db: sqlite3.Connection, key: str, items: Sequence[Stored]) -> None:
    """Insert entries as chunks and marks (inside the caller's transaction)."""
    db.executemany(
        "INSERT INTO journal_chunks"
        " (session_key, first_seq, last_seq, entries, last_at, codec, data)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (key, run[0][0], run[-1][0], len(run), run[-1][1], *pack([i[2] for i in run]))
            for run in chunks(items)
        ],
    )
    marks = [(key, seq, at, *mark) for seq, at, _line, mark in items if mark is not None]
    if marks:
        db.executemany(
            "INSERT INTO journal_marks (session_key, seq, at, kind, request_id, body)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            marks,
        )


def write_batch(
    db: sqlite3.Connection,
    key: str,
    items: Sequence[Stored],
    session_row: SessionRow | None = None,
) -> bool:
    """Store entries whose ``seq`` the writer assigned, in one transaction.

    The seqs must increase and continue past what is stored; a batch that does not is
    refused whole (``IntegrityError``), entries and mark alike.

    ``session_row`` (the session's changed columns and kept metrics) rides in the same
    transaction, under a savepoint: if it fails, the entries are stored all the same,
    and it returns False (the caller writes the row another way). True: written.
    """
    if not items:
        return False
    db.execute("BEGIN IMMEDIATE")
    try:
        row_written = write_into(db, key, items, session_row)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return row_written


def write_into(
    db: sqlite3.Connection, key: str, items: Sequence[Stored], session_row: SessionRow | None
) -> bool:
    """:func:`write_batch`'s work inside the caller's transaction (a group commit's:
    :mod:`.group_commit`); ``IntegrityError`` before anything is written if the seqs do
    not continue past what is stored."""
    if any(items[i][0] <= items[i - 1][0] for i in range(1, len(items))):
        raise sqlite3.IntegrityError("journal batch: seqs out of order")
    if items[0][0] <= last_seq(db, key):
        raise sqlite3.IntegrityError("journal batch: seq already stored")
    insert_items(db, key, items)
    db.execute(
        "INSERT INTO journal_heads (session_key, last_seq, reserved) VALUES (?, ?, ?)"
        " ON CONFLICT (session_key) DO UPDATE SET last_seq = excluded.last_seq,"
        " reserved = max(reserved, excluded.reserved)",
        (key, items[-1][0], items[-1][0] + RESERVE // 2),
    )
    return session_row is not None and _write_row(db, key, session_row)


def _write_row(db: sqlite3.Connection, key: str, row: SessionRow) -> bool:
    """The session row under a savepoint: its failure never costs the journal its batch."""
    db.execute("SAVEPOINT session_row")
    try:
        write_session_fields(db, key, row[0], row[1])
    except sqlite3.Error:
        db.execute("ROLLBACK TO session_row")
        db.execute("RELEASE session_row")
        return False
    db.execute("RELEASE session_row")
    return True


def stored(seq: int, at: float, kind: str, request_id: str | None, body: str) -> tuple[Stored, str]:
    """An entry as :func:`write_batch` takes it, and its public line."""
    line = entry_line(seq, at, kind, request_id, body)
    mark = None if kind == "acp" else (kind, request_id, body)
    return (seq, at, line.encode(), mark), line


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
        now = time.time()
        items = []
        if row is not None and int(row[1]) > int(row[0]):  # a lost writer's reservation
            items.append(gaps.gap_item(seq, now, int(row[0]), gaps.OWNER_LOST, None))
            seq += 1
        items.append(stored(seq, now, kind, request_id, body_of(payload))[0])
        insert_items(db, key, items)
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
    db: sqlite3.Connection,
    key: str,
    from_seq: int,
    *,
    upto: int | None = None,
    limit: int = 0,
    on_damage: OnDamage | None = None,
) -> list[tuple[int, bytes]]:
    """``(seq, public line)`` for entries ``from_seq <= seq (<= upto)``, in order; at most
    ``limit`` (0: all).

    A damaged chunk (:func:`tether.state.journal.chunks.decode`) is skipped and handed to
    ``on_damage``: its entries are missing from the result, never a reader's crash.
    """
    query = (
        "SELECT first_seq, last_seq, entries, codec, CAST(data AS BLOB) FROM journal_chunks"
        " WHERE session_key = ? AND last_seq >= ?"
    )
    args: list[Any] = [key, from_seq]
    if upto is not None:
        query += " AND first_seq <= ?"
        args.append(upto)
    out: list[tuple[int, bytes]] = []
    cursor = db.execute(query + " ORDER BY first_seq", args)
    try:
        for first, last, entries, codec, data in cursor:
            lines, damage = decode(codec, data, first, last, entries)
            if damage is not None:
                if on_damage is not None:
                    on_damage((int(first), int(last), damage))
                continue
            taken = []
            try:
                for line in lines:
                    seq = seq_of(line)
                    if upto is not None and seq > upto:
                        break
                    if seq >= from_seq:
                        taken.append((seq, line))
            except ValueError:  # a head past zlib's checksum: written so, never by us
                if on_damage is not None:
                    on_damage((int(first), int(last), "has an entry whose seq is unreadable"))
                continue
            out.extend(taken)
            if limit > 0 and len(out) >= limit:
                break
    finally:
        cursor.close()
    if limit > 0:
        del out[limit:]
    return out


def iter_lines(
    db: sqlite3.Connection,
    key: str,
    from_seq: int = 1,
    *,
    upto: int | None = None,
    on_damage: OnDamage | None = None,
) -> Iterator[tuple[int, str]]:
    """``(seq, public JSON line)`` for every stored entry from ``from_seq``, in chunks;
    damaged chunks are skipped and handed to ``on_damage`` (see :func:`read`)."""
    cursor = from_seq
    while True:
        rows = read(db, key, cursor, upto=upto, limit=READ_CHUNK, on_damage=on_damage)
        for seq, line in rows:
            yield seq, line.decode()
        if len(rows) < READ_CHUNK:
            return
        cursor = rows[-1][0] + 1


def turn_rows(db: sqlite3.Connection, key: str) -> list[Row]:
    """The entries turn summaries are built from, in order (an indexed read)."""
    marks = ", ".join("?" for _ in TURN_KINDS)
    return db.execute(
        "SELECT seq, at, kind, request_id, body FROM journal_marks"  # noqa: S608 -- placeholders only
        f" WHERE session_key = ? AND kind IN ({marks}) ORDER BY seq",
        (key, *TURN_KINDS),
    ).fetchall()


def last_of_kind(db: sqlite3.Connection, key: str, kind: str) -> Row | None:
    """The session's newest control record of ``kind`` (e.g. ``session_ended``)."""
    row: Row | None = db.execute(
        "SELECT seq, at, kind, request_id, body FROM journal_marks"
        " WHERE session_key = ? AND kind = ? ORDER BY seq DESC LIMIT 1",
        (key, kind),
    ).fetchone()
    return row


def incarnation_start(db: sqlite3.Connection, key: str, created_at: float) -> int:
    """The first ``seq`` of the session as it is now, created (or re-created, by
    ``sessions new`` or a reopen after close) at ``created_at``: the journal goes on under
    the same key, and what an earlier session of that key did ended with its
    ``session_ended`` before then. History and transcripts start here."""
    row = db.execute(
        "SELECT max(seq) FROM journal_marks WHERE session_key = ? AND kind = 'session_ended'"
        " AND at < ?",
        (key, created_at),
    ).fetchone()
    return int(row[0]) + 1 if row and row[0] is not None else 1


def turns_start(db: sqlite3.Connection, key: str, tail: int | None) -> int:
    """The first ``seq`` of the last ``tail`` turns (1 for all; past the end for 0)."""
    if tail is None:
        return 1
    if tail <= 0:
        return last_seq(db, key) + 1
    row = db.execute(
        "SELECT seq FROM journal_marks WHERE session_key = ? AND kind = 'prompt_queued'"
        " ORDER BY seq DESC LIMIT 1 OFFSET ?",
        (key, tail - 1),
    ).fetchone()
    return int(row[0]) if row else 1


def stats(db: sqlite3.Connection, key: str) -> JournalStats:
    row = db.execute(
        "SELECT min(first_seq), coalesce(sum(entries), 0), coalesce(sum(length(data)), 0)"
        " FROM journal_chunks WHERE session_key = ?",
        (key,),
    ).fetchone()
    oldest = None
    if row[0] is not None:
        first = db.execute(
            "SELECT first_seq, last_seq, entries, codec, CAST(data AS BLOB), last_at"
            " FROM journal_chunks"
            " WHERE session_key = ? AND first_seq = ?",
            (key, row[0]),
        ).fetchone()
        lines, damage = decode(first[3], first[4], first[0], first[1], first[2])
        # A damaged oldest chunk: its newest time stands for it (retention is not stopped).
        oldest = float(first[5]) if damage is not None else at_of(lines[0])
    return JournalStats(
        first_seq=row[0],
        last_seq=last_seq(db, key),
        entries=int(row[1]),
        bytes=int(row[2]),
        oldest_at=oldest,
    )
