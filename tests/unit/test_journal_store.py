"""The journal's storage: batches, the high-water mark, retention, prune, and migration."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from tether import paths
from tether.journal import store
from tether.journal.entry import Retention, body_of
from tether.registry import _MIGRATIONS, Registry


def _rows(first: int, count: int, *, at: float = 0.0, size: int = 10) -> list[store.Row]:
    return [
        (seq, at or time.time(), "turn_ended", f"r-{seq}", body_of({"pad": "x" * size}))
        for seq in range(first, first + count)
    ]


def _session(reg: Registry, key: str = "k1") -> str:
    reg.upsert_session(key=key, name="", agent_command=["mock"], agent_label="mock", cwd="/")
    return key


def test_batches_continue_the_sequence_and_advance_the_mark() -> None:
    with Registry() as reg:
        key = _session(reg)
        assert store.last_seq(reg._db, key) == 0
        store.write_batch(reg._db, key, _rows(1, 3))
        store.write_batch(reg._db, key, _rows(4, 2))
        assert store.last_seq(reg._db, key) == 5
        assert [r[0] for r in store.read(reg._db, key, 2)] == [2, 3, 4, 5]
        assert [r[0] for r in store.read(reg._db, key, 2, upto=3)] == [2, 3]
        store.release(reg._db, key)  # the writer stopped cleanly: no gap after it
        assert store.append_now(reg._db, key, "session_ended", {"reason": "completed"}) == 6


def test_a_crashed_writer_leaves_a_gap_never_a_reused_seq() -> None:
    """Seqs a killed owner handed out (seen live, never stored) are never handed out again."""
    with Registry() as reg:
        key = _session(reg)
        first = store.claim(reg._db, key)
        assert first == 1
        store.write_batch(reg._db, key, _rows(1, 3))
        # killed here: seqs 4.. may have reached watchers; the next owner starts past them
        second = store.claim(reg._db, key)
        assert second > 3 + 1000
        store.write_batch(reg._db, key, _rows(second, 2))
        store.release(reg._db, key)
        assert store.claim(reg._db, key) == second + 2  # a clean stop: no gap


def test_a_failed_batch_leaves_nothing_behind() -> None:
    """A batch colliding with a stored seq rolls back whole: entries and mark alike."""
    with Registry() as reg:
        key = _session(reg)
        store.write_batch(reg._db, key, _rows(1, 2))
        try:
            store.write_batch(reg._db, key, _rows(3, 2) + _rows(2, 1))
        except sqlite3.IntegrityError:
            pass
        else:  # pragma: no cover - the duplicate must be refused
            raise AssertionError("duplicate seq accepted")
        assert store.last_seq(reg._db, key) == 2
        assert [r[0] for r in store.read(reg._db, key, 1)] == [1, 2]


def test_retention_by_entries_keeps_the_mark() -> None:
    """Retention deletes the oldest entries; seq numbers are never reused afterwards."""
    with Registry() as reg:
        key = _session(reg)
        store.write_batch(reg._db, key, _rows(1, 120))
        removed = store.apply_retention(reg._db, key, Retention(max_entries=100))
        assert removed == 30  # down to 90 % of the bound
        assert store.read(reg._db, key, 1)[0][0] == 31
        assert store.last_seq(reg._db, key) == 120
        store.apply_retention(reg._db, key, Retention(max_entries=1, max_bytes=0, max_age_s=0))
        assert store.last_seq(reg._db, key) == 120  # every entry may go; the mark stays


def test_retention_by_bytes_and_age() -> None:
    with Registry() as reg:
        key = _session(reg)
        store.write_batch(reg._db, key, _rows(1, 100, size=100))
        total = store.stats(reg._db, key).bytes
        store.apply_retention(
            reg._db, key, Retention(max_entries=0, max_bytes=total // 2, max_age_s=0)
        )
        assert store.stats(reg._db, key).bytes <= total // 2
        old = time.time() - 100 * 86400
        other = _session(reg, "k2")
        store.write_batch(reg._db, other, _rows(1, 5, at=old) + _rows(6, 5))
        store.apply_retention(
            reg._db, other, Retention(max_entries=0, max_bytes=0, max_age_s=86400)
        )
        assert [r[0] for r in store.read(reg._db, other, 1)] == [6, 7, 8, 9, 10]


def test_prune_removes_closed_sessions_whole_and_old_entries() -> None:
    with Registry() as reg:
        live, gone = _session(reg, "live"), _session(reg, "gone")
        store.write_batch(reg._db, live, _rows(1, 3, at=1.0) + _rows(4, 2))
        store.write_batch(reg._db, gone, _rows(1, 2))
        reg.add_event(gone, "x", {})
        reg.update_session(gone, state="closed")
        report = reg.prune(older_than=time.time() - 60, closed=True)
        assert report["sessionsRemoved"] == ["gone"]
        assert reg.session("gone") is None
        assert store.last_seq(reg._db, "gone") == 0
        assert [r[0] for r in store.read(reg._db, live, 1)] == [4, 5]
        assert reg.events("gone") == []


def test_a_v1_database_migrates_and_keeps_working(tmp_path: Path) -> None:
    """A state.db written by the first schema opens; its turns become journal entries."""
    path = Path(paths.state_db())
    db = sqlite3.connect(path, isolation_level=None)
    for statement in _MIGRATIONS[0].split(";"):
        if statement.strip():
            db.execute(statement)
    db.execute("PRAGMA user_version = 1")
    db.execute("INSERT INTO meta (key, value) VALUES ('instance_id', 'abc')")
    db.execute(
        "INSERT INTO sessions (key, name, agent_command, agent_label, cwd, state, created_at,"
        " updated_at) VALUES ('old', '', '[\"mock\"]', 'mock', '/', 'open', 1, 1)"
    )
    for i, (kind, payload) in enumerate(
        [
            ("turn", {"requestId": "r-1", "stopReason": "end_turn", "prompt": "hello"}),
            ("session_ended", {"reason": "terminated", "terminatedBy": "daemon"}),
            ("turn", {"requestId": "r-2", "stopReason": "cancelled", "prompt": "again"}),
        ]
    ):
        db.execute(
            "INSERT INTO events (session_key, kind, payload, at) VALUES ('old', ?, ?, ?)",
            (kind, json.dumps(payload), 10.0 + i),
        )
    db.close()
    with Registry() as reg:
        assert reg.instance_id == "abc"
        rows = store.read(reg._db, "old", 1)
        assert [(r[0], r[2], r[3]) for r in rows] == [
            (1, "turn_ended", "r-1"),
            (2, "session_ended", None),
            (3, "turn_ended", "r-2"),
        ]
        assert store.last_seq(reg._db, "old") == 3
        assert reg.session("old") is not None
        store.write_batch(reg._db, "old", _rows(4, 1))
        assert reg._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
