"""A session host's group commit: many owners' batches in one transaction, each batch
stored whole or refused alone, each writer told its own outcome."""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

import pytest

from tether import paths
from tether.state.journal import group_commit, store
from tether.state.journal.db import open_db
from tether.state.journal.entry import body_of
from tether.state.journal.group_commit import GroupCommit
from tether.state.registry import Registry


def _rows(first: int, count: int) -> list[store.Stored]:
    return [
        store.stored(seq, time.time(), "turn_ended", f"r-{seq}", body_of({"n": seq}))[0]
        for seq in range(first, first + count)
    ]


def _sessions(n: int) -> list[str]:
    keys = [f"k{i}" for i in range(n)]
    with Registry() as reg:
        for key in keys:
            reg.upsert_session(key=key, name="", agent_command=["m"], agent_label="m", cwd="/")
    return keys


def test_writers_of_one_host_store_everything_many_batches_per_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Eight writers, 25 batches each, through one group: all stored, in order, and in
    fewer transactions than batches (the writers waiting behind a commit ride on it)."""
    keys = _sessions(8)
    group = GroupCommit()
    transactions: list[int] = []
    real = group_commit._commit

    def counted(db: sqlite3.Connection, batches: list[Any]) -> None:
        transactions.append(len(batches))
        time.sleep(0.002)  # a commit takes a moment: writers queue behind it
        real(db, batches)

    monkeypatch.setattr(group_commit, "_commit", counted)
    errors: list[BaseException] = []

    def writer(key: str) -> None:
        db = open_db(paths.state_db())
        try:
            for batch in range(25):
                group.write_batch(db, key, _rows(batch * 4 + 1, 4))
        except BaseException as exc:
            errors.append(exc)
        finally:
            db.close()

    threads = [threading.Thread(target=writer, args=(key,)) for key in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sum(transactions) == 8 * 25
    assert len(transactions) < 8 * 25  # some transactions carried several batches
    with Registry() as reg:
        for key in keys:
            assert store.last_seq(reg._db, key) == 100
            assert [r[0] for r in store.read(reg._db, key, 1)] == list(range(1, 101))


def test_a_refused_batch_costs_no_other_batch_of_its_group_its_entries() -> None:
    """Three batches queued behind a commit in progress go in one group: the one whose
    seqs are already stored is refused (IntegrityError, to its writer alone); the others
    are stored, and so is everything after."""
    good, bad, other = _sessions(3)
    with Registry() as reg:
        store.write_batch(reg._db, bad, _rows(1, 5))  # seqs 1..5 are stored already
    group = GroupCommit()
    outcomes: dict[str, object] = {}

    def writer(key: str, rows: list[store.Stored]) -> None:
        db = open_db(paths.state_db())
        try:
            outcomes[key] = group.write_batch(db, key, rows)
        except sqlite3.Error as exc:
            outcomes[key] = exc
        finally:
            db.close()

    group._lock.acquire()  # a commit in progress: the next three batches queue up
    threads = [
        threading.Thread(target=writer, args=(good, _rows(1, 3))),
        threading.Thread(target=writer, args=(bad, _rows(3, 3))),
        threading.Thread(target=writer, args=(other, _rows(1, 2))),
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while len(group._queue) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(group._queue) == 3
    group._lock.release()
    for t in threads:
        t.join(30)
    assert outcomes[good] is False  # stored (no session row to write)
    assert outcomes[other] is False
    assert isinstance(outcomes[bad], sqlite3.IntegrityError)
    with Registry() as reg:
        assert store.last_seq(reg._db, good) == 3
        assert store.last_seq(reg._db, other) == 2
        assert store.last_seq(reg._db, bad) == 5  # its refused batch left nothing


def test_a_failed_transaction_refuses_every_batch_of_its_group() -> None:
    """The database refuses the transaction (here: its write lock is held past the
    timeout): every batch of the group gets the error, none reads as stored."""
    (key,) = _sessions(1)
    group = GroupCommit()
    holder = sqlite3.connect(paths.state_db(), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    db = open_db(paths.state_db())
    db.execute("PRAGMA busy_timeout=50")
    try:
        with pytest.raises(sqlite3.OperationalError):
            group.write_batch(db, key, _rows(1, 2))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert group.write_batch(db, key, _rows(1, 2)) is False  # the lock gone: stored
    db.close()
    with Registry() as reg:
        assert store.last_seq(reg._db, key) == 2
