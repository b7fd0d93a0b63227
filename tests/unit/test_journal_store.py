"""The journal's storage: batches, the high-water mark, retention, prune, and migration."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from tether import paths
from tether.state.journal import chunks as chunks_mod
from tether.state.journal import retention, store
from tether.state.journal.entry import Retention, acp_body, body_of, entry_line, parse_line
from tether.state.registry import Registry
from tether.state.schema import MIGRATIONS


def _rows(first: int, count: int, *, at: float = 0.0, size: int = 10) -> list[store.Stored]:
    return [
        store.stored(
            seq, at or time.time(), "turn_ended", f"r-{seq}", body_of({"pad": "x" * size})
        )[0]
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


def test_the_first_entry_after_a_lost_writer_names_the_gap() -> None:
    """Issue 21 item 3: after a writer that never released its reservation, the next
    one's first entry (an owner's, or an offline close's) says where the journal
    continues and why; after a clean stop there is no gap and no record."""
    with Registry() as reg:
        key = _session(reg)
        store.claim(reg._db, key)
        store.write_batch(reg._db, key, _rows(1, 3))
        assert store.unreleased(reg._db, key) == 3  # killed: seqs past 3 may have been seen
        seq = store.append_now(reg._db, key, "session_ended", {"reason": "closed"})
        gap, ended = store.read(reg._db, key, 4)
        assert gap[0] == seq - 1 > 1000
        assert ended[0] == seq
        body = parse_line(gap[1].decode())
        assert (body["kind"], body["after"], body["reason"]) == ("journal_gap", 3, "owner-lost")
        assert store.unreleased(reg._db, key) is None  # append_now leaves no reservation


def test_retention_counts_entries_not_seqs_across_a_hole() -> None:
    """Issue 21 item 3: a journal with a hole of a million seqs (an owner lost) keeps
    its newest entries under the entry bound; it used to cut by seq and lose them all."""
    with Registry() as reg:
        key = _session(reg)
        store.write_batch(reg._db, key, _rows(1, 50))
        store.write_batch(reg._db, key, _rows(1 << 20, 50))
        removed = retention.apply_retention(reg._db, key, Retention(max_entries=90))
        assert removed == 100 - 81
        seqs = [r[0] for r in store.read(reg._db, key, 1)]
        assert seqs[0] == 19  # the gap record
        assert seqs[1:] == [*range(20, 51), *range(1 << 20, (1 << 20) + 50)]
        gap = parse_line(store.read(reg._db, key, 1, limit=1)[0][1].decode())
        assert (gap["after"], gap["reason"], gap["entries"]) == (0, "retention", 19)
        # A second cut folds the first gap record into its own: still "after 0".
        assert retention.apply_retention(reg._db, key, Retention(max_entries=60)) > 0
        again = parse_line(store.read(reg._db, key, 1, limit=1)[0][1].decode())
        assert (again["after"], again["reason"]) == (0, "retention")
        assert again["entries"] == 100 - (store.stats(reg._db, key).entries - 1)
        # Nothing over the bound: the gap record is not cut again and again.
        assert retention.apply_retention(reg._db, key, Retention(max_entries=60)) == 0


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
        removed = retention.apply_retention(reg._db, key, Retention(max_entries=100))
        assert removed == 30  # down to 90 % of the bound
        first = store.read(reg._db, key, 1)[0]
        assert first[0] == 30  # the gap record, at the last seq that went
        assert parse_line(first[1].decode())["kind"] == "journal_gap"
        assert store.read(reg._db, key, 31, limit=1)[0][0] == 31
        assert store.last_seq(reg._db, key) == 120
        retention.apply_retention(reg._db, key, Retention(max_entries=1, max_bytes=0, max_age_s=0))
        assert store.last_seq(reg._db, key) == 120  # every entry may go; the mark stays


def test_retention_by_bytes_and_age() -> None:
    with Registry() as reg:
        key = _session(reg)
        store.write_batch(reg._db, key, _rows(1, 100, size=100))
        total = store.stats(reg._db, key).bytes
        retention.apply_retention(
            reg._db, key, Retention(max_entries=0, max_bytes=total // 2, max_age_s=0)
        )
        assert store.stats(reg._db, key).bytes <= total // 2
        old = time.time() - 100 * 86400
        other = _session(reg, "k2")
        store.write_batch(reg._db, other, _rows(1, 5, at=old) + _rows(6, 5))
        retention.apply_retention(
            reg._db, other, Retention(max_entries=0, max_bytes=0, max_age_s=86400)
        )
        assert [r[0] for r in store.read(reg._db, other, 1)] == [5, 6, 7, 8, 9, 10]


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
        assert [r[0] for r in store.read(reg._db, live, 1)] == [3, 4, 5]  # 3: the gap
        assert reg.events("gone") == []


def test_a_v1_database_migrates_and_keeps_working(tmp_path: Path) -> None:
    """A state.db written by the first schema opens; its turns become journal entries."""
    path = Path(paths.state_db())
    db = sqlite3.connect(path, isolation_level=None)
    for statement in MIGRATIONS[0].split(";"):
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
        rows = [parse_line(line.decode()) for _seq, line in store.read(reg._db, "old", 1)]
        assert [(r["seq"], r["kind"], r.get("requestId")) for r in rows] == [
            (1, "turn_ended", "r-1"),
            (2, "session_ended", None),
            (3, "turn_ended", "r-2"),
        ]
        assert store.last_seq(reg._db, "old") == 3
        assert reg.session("old") is not None
        store.write_batch(reg._db, "old", _rows(4, 1))
        assert reg._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def _acp(first: int, count: int, text: str = "chunk") -> list[store.Stored]:
    frame = '{"jsonrpc":"2.0","method":"session/update","params":{"text":"%s %d"}}'
    return [
        store.stored(
            seq, time.time(), "acp", "r-1", acp_body("in", (frame % (text, seq)).encode())
        )[0]
        for seq in range(first, first + count)
    ]


def test_a_large_batch_is_stored_in_compressed_chunks_and_read_back_exactly() -> None:
    """Entries come back byte for byte, from any seq, within ``upto`` and ``limit``."""
    with Registry() as reg:
        key = _session(reg)
        items = _acp(1, 2000) + _rows(2001, 3)
        store.write_batch(reg._db, key, items)
        chunks = reg._db.execute(
            "SELECT count(*), sum(codec = 1), sum(length(data)) FROM journal_chunks"
        ).fetchone()
        assert chunks[0] >= 2000 // chunks_mod.CHUNK_ENTRIES  # split, so a mid-read unpacks one
        assert chunks[1] >= 1  # large chunks are compressed ...
        assert chunks[2] < sum(len(i[2]) for i in items) // 3  # ... and it pays
        lines = dict(store.read(reg._db, key, 1))
        assert list(lines) == list(range(1, 2004))
        assert all(lines[i[0]] == i[2] for i in items)
        assert [s for s, _ in store.read(reg._db, key, 700, upto=705)] == list(range(700, 706))
        assert [s for s, _ in store.read(reg._db, key, 511, limit=3)] == [511, 512, 513]
        # control records are indexed apart; frames are not
        assert [r[0] for r in store.turn_rows(reg._db, key)] == [2001, 2002, 2003]
        last = store.last_of_kind(reg._db, key, "turn_ended")
        assert last is not None
        assert last[0] == 2003
        # a cut inside a chunk keeps exactly the entries from the cut on
        with reg.transaction() as db:
            assert retention.delete_before(db, key, 600) == 599
        assert store.read(reg._db, key, 600)[0] == (600, lines[600])
        assert store.read(reg._db, key, 1)[0][0] == 599  # the gap record, then 600 on
        assert store.stats(reg._db, key).entries == 2003 - 599 + 1


def test_a_batch_out_of_order_is_refused_whole() -> None:
    with Registry() as reg:
        key = _session(reg)
        with pytest.raises(sqlite3.IntegrityError):
            store.write_batch(reg._db, key, _rows(1, 2) + _rows(2, 1))
        assert store.read(reg._db, key, 1) == []
        assert store.last_seq(reg._db, key) == 0


def test_a_v5_journal_migrates_to_chunks_and_keeps_working() -> None:
    """A state.db written by the schema before chunked storage opens with the same
    entries, line for line, and goes on: turns, the end record, new batches, retention."""
    path = Path(paths.state_db())
    db = sqlite3.connect(path, isolation_level=None)
    for migration in MIGRATIONS[:5]:
        for statement in migration.split(";"):
            if statement.strip():
                db.execute(statement)
    db.execute("PRAGMA user_version = 5")
    db.execute(
        "INSERT INTO sessions (key, name, agent_command, agent_label, cwd, state, created_at,"
        " updated_at) VALUES ('v5', '', '[\"mock\"]', 'mock', '/', 'open', 1, 1)"
    )
    frame = '{"jsonrpc":"2.0","method":"session/update","params":{"t":"hé \\u2028"}}'
    old = [
        (1, 10.5, "prompt_queued", "r-1", '{"prompt":"hi"}'),
        (2, 11.0, "turn_started", "r-1", "{}"),
        (3, 11.25, "acp", "r-1", acp_body("in", frame.encode())),
        (4, 12.0, "turn_ended", "r-1", '{"stopReason":"end_turn"}'),
        (5, 13.0, "session_ended", None, '{"reason":"closed"}'),
    ]
    db.executemany(
        "INSERT INTO journal (session_key, seq, at, kind, request_id, body)"
        " VALUES ('v5', ?, ?, ?, ?, ?)",
        old,
    )
    db.execute("INSERT INTO journal_heads (session_key, last_seq) VALUES ('v5', 5)")
    db.close()
    with Registry() as reg:
        got = [(s, parse_line(line.decode())) for s, line in store.read(reg._db, "v5", 1)]
        want = [(r[0], parse_line(entry_line(*r))) for r in old]
        assert got == want
        assert [r[2] for r in store.turn_rows(reg._db, "v5")] == [
            "prompt_queued",
            "turn_started",
            "turn_ended",
        ]
        ended = store.last_of_kind(reg._db, "v5", "session_ended")
        assert ended is not None
        assert ended[0] == 5
        assert store.claim(reg._db, "v5") == 6
        store.write_batch(reg._db, "v5", _acp(6, 10))
        assert [s for s, _ in store.read(reg._db, "v5", 4)] == list(range(4, 16))
        assert retention.apply_retention(reg._db, "v5", Retention(max_entries=5)) == 11
        assert reg._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        tables = {r[0] for r in reg._db.execute("SELECT name FROM sqlite_master")}
        assert "journal" not in tables


def _lines(first: int, count: int, size: int = 10) -> list[bytes]:
    return [row[2] for row in _rows(first, count, size=size)]


@pytest.mark.parametrize(
    ("codec", "data", "entries", "why"),
    [
        pytest.param(chunks_mod.ZLIB, b"not zlib", 3, "does not decompress", id="zlib"),
        pytest.param(7, b"", 3, "unknown encoding", id="codec"),
        pytest.param(0, b"\n".join(_lines(1, 3)), 3, "cut short", id="no-final-lf"),
        pytest.param(0, b"\n".join(_lines(1, 3)) + b"\xff\n", 3, "not UTF-8", id="utf8"),
        pytest.param(0, b"\n".join(_lines(1, 2)) + b"\n", 3, "holds 2 entries", id="count"),
        pytest.param(0, b"\n".join(_lines(2, 3)) + b"\n", 3, "holds seqs 2-4", id="range"),
        pytest.param(
            0,
            b"\n".join(_lines(1, 3)).replace(b'"kind":', b'"kind";', 1) + b"\n",
            3,
            "entry 1 that is not valid JSON",
            id="json",
        ),
        pytest.param(0, b"\n".join(reversed(_lines(1, 3))) + b"\n", 3, "out of order", id="order"),
    ],
)
def test_a_damaged_chunk_says_why_and_is_never_a_crash(
    codec: int, data: bytes, entries: int, why: str
) -> None:
    lines, damage = chunks_mod.decode(codec, data, 1, 3, entries)
    assert lines == []
    assert damage is not None
    assert why in damage


def test_a_whole_chunk_decodes_and_a_compressed_one_is_json_checked_only_in_full() -> None:
    lines = _lines(1, 200, size=40)
    codec, data = chunks_mod.pack(lines)
    assert codec == chunks_mod.ZLIB
    assert chunks_mod.decode(codec, data, 1, 200, 200) == (lines, None)
    one = _lines(7, 1, size=2000)  # one entry: its first line is its last
    assert chunks_mod.decode(*chunks_mod.pack(one), 7, 7, 1) == (one, None)
    bad = [*lines[:-1], lines[-1].replace(b'"kind":', b'"kind";')]
    codec, data = chunks_mod.pack(bad)
    assert chunks_mod.decode(codec, data, 1, 200, 200)[1] is None  # zlib's checksum holds
    assert "200 that is not valid JSON" in str(
        chunks_mod.decode(codec, data, 1, 200, 200, full=True)[1]
    )


def test_readers_skip_a_damaged_chunk_and_say_which_and_retention_still_runs() -> None:
    """A read returns every other entry and reports the damaged chunk's seq range once;
    retention cuts past it (a damaged chunk cannot be split: it goes whole)."""
    with Registry() as reg:
        key = _session(reg)
        for first in (1, 4, 7):
            store.write_batch(reg._db, key, _rows(first, 3))
        reg._db.execute(
            "UPDATE journal_chunks SET data = CAST(X'FF' AS BLOB) || data"
            " WHERE session_key = ? AND first_seq = 4",
            (key,),
        )
        seen: list[store.Damage] = []
        assert [s for s, _ in store.read(reg._db, key, 1, on_damage=seen.append)] == [
            1,
            2,
            3,
            7,
            8,
            9,
        ]
        assert [(a, b) for a, b, _why in seen] == [(4, 6)]
        assert [s for s, _ in store.iter_lines(reg._db, key, 5)] == [7, 8, 9]
        from tether.state.journal.damage import damaged_chunks

        assert [(k, d[:2]) for k, d in damaged_chunks(reg._db)] == [(key, (4, 6))]
        assert retention.delete_before(reg._db, key, 5) == 6  # 1-3, and 4-6 whole
        # What went is named by one retention gap record at the last seq that went.
        rows = store.read(reg._db, key, 1)
        assert [s for s, _ in rows] == [6, 7, 8, 9]
        gap = json.loads(rows[0][1])
        assert (gap["kind"], gap["reason"], gap["after"]) == ("journal_gap", "retention", 0)
