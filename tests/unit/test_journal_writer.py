"""The journal writer under a disk that cannot keep up: memory stays bounded."""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

import pytest

from tether import paths
from tether.state.journal import store, writer
from tether.state.journal.entry import parse_line
from tether.state.registry import Registry


def test_a_failing_disk_bounds_the_backlog_and_counts_what_it_gave_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Writes fail: the loop stalls (boundedly), then gives the oldest rows up."""
    with Registry() as reg:
        reg.upsert_session(key="k", name="", agent_command=["m"], agent_label="m", cwd="/")
    monkeypatch.setattr(writer, "MAX_BACKLOG_BYTES", 64 * 1024)
    monkeypatch.setattr(writer, "STALL_MAX_S", 0.05)
    monkeypatch.setattr(writer, "RETRY_MAX_S", 0.05)

    def broken(*_: Any) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(store, "write_batch", broken)
    journal = writer.JournalWriter(paths.state_db(), "k")
    for i in range(2000):
        journal.append("turn_ended", {"pad": "x" * 100, "i": i})
    assert journal.stalls > 0
    assert journal.dropped > 0
    assert journal._pending_bytes <= writer.MAX_BACKLOG_BYTES + 200
    assert not journal.close(timeout=1.0)  # nothing could be stored: it says so


def test_a_slow_writer_stalls_the_appender_and_loses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with Registry() as reg:
        reg.upsert_session(key="k", name="", agent_command=["m"], agent_label="m", cwd="/")
    monkeypatch.setattr(writer, "MAX_BACKLOG_BYTES", 16 * 1024)
    journal = writer.JournalWriter(paths.state_db(), "k")
    for i in range(3000):
        journal.append("turn_ended", {"pad": "y" * 50, "i": i})
    assert journal.close()
    assert journal.dropped == 0
    with Registry() as reg:
        assert [r[0] for r in store.read(reg._db, "k", 1)][-1] == 3000


def test_an_acp_entry_is_the_line_entry_line_builds() -> None:
    """The hot path's byte-built line is exactly the public line, and is stored as such."""
    from tether.state.journal.entry import acp_body, entry_line

    with Registry() as reg:
        reg.upsert_session(key="k", name="", agent_command=["m"], agent_label="m", cwd="/")
    journal = writer.JournalWriter(paths.state_db(), "k")
    seen: list[tuple[int, bytes]] = []
    journal.listeners.append(lambda seq, line: seen.append((seq, line)))
    frame = '{"jsonrpc":"2.0","id":3,"result":{"t":"é \\"q\\""}}'.encode()
    for direction, rid in (("in", "r-1"), ("out", None), ("in", 'r-"2')):
        journal.append_acp(direction, frame, rid)
    assert journal.close()
    with Registry() as reg:
        stored = store.read(reg._db, "k", 1)
    assert stored == seen
    for (seq, line), (direction, rid) in zip(
        seen, (("in", "r-1"), ("out", None), ("in", 'r-"2')), strict=True
    ):
        at = float(line.split(b'"at":')[1].split(b",")[0])
        assert line.decode() == entry_line(seq, at, "acp", rid, acp_body(direction, frame))


def test_a_full_disk_is_a_condition_and_what_was_dropped_is_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 21 item 2: while the disk is full the appender never waits for it (a loop
    that waited looked hung); the writer states STATE_FULL; the frames it gave up are
    replaced by journal_gap records, stored once the disk takes writes again, so every
    seq handed out is either stored or stood for by a gap record."""
    with Registry() as reg:
        reg.upsert_session(key="k", name="", agent_command=["m"], agent_label="m", cwd="/")
    monkeypatch.setattr(writer, "MAX_BACKLOG_BYTES", 64 * 1024)
    monkeypatch.setattr(writer, "STALL_MAX_S", 3600.0)  # a wait here would hang the test
    monkeypatch.setattr(writer, "RETRY_MAX_S", 0.05)
    real = store.write_batch
    full = threading.Event()
    full.set()

    def disk(*args: Any) -> None:
        if full.is_set():
            exc = sqlite3.OperationalError("database or disk is full")
            exc.sqlite_errorname = "SQLITE_FULL"  # type: ignore[attr-defined]  # as SQLite sets it
            raise exc
        real(*args)

    monkeypatch.setattr(store, "write_batch", disk)
    journal = writer.JournalWriter(paths.state_db(), "k")
    journal.append("turn_started", {}, "r-1")
    for _ in range(500):  # the writer notices at its first attempt
        if journal.failure is not None:
            break
        threading.Event().wait(0.01)
    assert journal.failure is not None
    assert journal.failure.detail_code == "STATE_FULL"
    for i in range(3000):
        journal.append_acp("in", b'{"jsonrpc":"2.0","method":"u","params":{"i":%d}}' % i, "r-1")
    journal.append("turn_ended", {"stopReason": "end_turn"}, "r-1")
    assert journal.dropped > 0
    full.clear()
    assert journal.close(timeout=10.0)
    assert journal.failure is None
    with Registry() as reg:
        rows = [(seq, parse_line(line.decode())) for seq, line in store.read(reg._db, "k", 1)]
    kinds = [entry["kind"] for _seq, entry in rows]
    assert kinds[0] == "turn_started"
    assert kinds[-1] == "turn_ended"
    covered = 0
    lost = 0
    for seq, entry in rows:
        if entry["kind"] == "journal_gap":
            assert entry["reason"] == "entries-dropped"
            assert entry["cause"] == "STATE_FULL"
            assert entry["after"] == covered  # it names the last seq before the hole
            lost += entry["entries"]
        else:
            assert seq == covered + 1
        covered = seq
    assert covered == journal.last_seq == 3002
    assert lost == journal.dropped


def test_a_turns_entries_wait_for_company_and_its_end_is_stored_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A turn's start and frames wake the writer ``BATCH_S`` later (one commit for a
    short turn); its end, like any other record, wakes it at once, everything before it
    stored with it (issue 23)."""
    import asyncio
    import time

    with Registry() as reg:
        reg.upsert_session(key="k", name="", agent_command=["m"], agent_label="m", cwd="/")
    monkeypatch.setattr(writer, "BATCH_S", 60.0)  # never, within this test

    async def main() -> tuple[bool, int, int]:
        journal = writer.JournalWriter(paths.state_db(), "k")
        journal.append("prompt_queued", {"prompt": "hi"}, "r-1")
        journal.append_acp("in", b'{"jsonrpc":"2.0","method":"session/update"}', "r-1")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        woken_early = journal._wake.is_set() or journal.stored_seq >= journal.last_seq
        end = journal.append("turn_ended", {"stopReason": "end_turn"}, "r-1")

        def stored_by_then() -> int:  # the loop is not needed for it: no more passes
            deadline = time.monotonic() + 10
            while journal.stored_seq < end and time.monotonic() < deadline:
                time.sleep(0.01)
            return journal.stored_seq

        stored = await asyncio.to_thread(stored_by_then)
        await asyncio.to_thread(journal.close)
        return woken_early, stored, end

    woken_early, stored, end = asyncio.run(main())
    assert not woken_early
    assert stored == end


def _session_row(key: str) -> Any:
    with Registry() as reg:
        return reg.session(key)


def _wait_for(check: Any, what: str) -> None:
    import time

    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_commit_carries_the_owner_s_changed_status_in_its_own_transaction() -> None:
    """Issue 23: a quick turn's entries and its owner's status share one commit. The
    row is written with the batch (not by the heartbeat's thread, which never starts
    here), with the kept metrics, and ``settle`` hears that it was."""
    from tether import metrics
    from tether.owner.heartbeat import Heartbeat

    with Registry() as reg:
        reg.upsert_session(key="k", name="", agent_command=["m"], agent_label="m", cwd="/")
    kept = metrics.Deferred()
    status = {"owner_status": "running", "queue_depth": 1}
    beat = Heartbeat("k", unresponsive_after=300.0, fields=lambda: dict(status), kept=kept)
    journal = writer.JournalWriter(paths.state_db(), "k")
    journal.carry = beat.carry
    try:
        kept.incr("cancel_total", outcome="success")
        beat.changed(carried=True)
        journal.append("turn_ended", {"stopReason": "end_turn"})  # urgent: committed now
        _wait_for(lambda: _session_row("k").owner_status == "running", "no row carried")
        assert _session_row("k").queue_depth == 1
        with Registry() as reg:
            assert reg.counters()["cancel_total{outcome=success}"] == 1
        assert not beat.dirty
        assert kept.take() == []
        # Nothing changed since: the next commit carries no row.
        status["owner_status"] = "unwritten"  # (not marked changed: nobody writes it)
        journal.append("turn_ended", {"stopReason": "end_turn"})
        _wait_for(lambda: journal.stored_seq == journal.last_seq, "not stored")
        assert _session_row("k").owner_status == "running"
    finally:
        assert journal.close()


def test_a_row_that_fails_never_costs_the_batch_and_is_marked_for_the_heartbeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The carried row is under a savepoint: its failure leaves the entries stored, the
    metrics are given back, and the row is marked changed again (the heartbeat's thread
    writes it)."""
    from tether import metrics
    from tether.owner.heartbeat import Heartbeat

    with Registry() as reg:
        reg.upsert_session(key="k", name="", agent_command=["m"], agent_label="m", cwd="/")

    def broken(*_: Any) -> None:
        raise sqlite3.OperationalError("no such column: owner_status")

    monkeypatch.setattr(store, "write_session_fields", broken)
    kept = metrics.Deferred()
    beat = Heartbeat("k", unresponsive_after=300.0, fields=lambda: {"owner_status": "x"}, kept=kept)
    journal = writer.JournalWriter(paths.state_db(), "k")
    journal.carry = beat.carry
    try:
        kept.incr("owner_spawn_total")
        beat.changed(carried=True)
        seq = journal.append("turn_ended", {"stopReason": "end_turn"})
        _wait_for(lambda: journal.stored_seq >= seq, "the batch was not stored")
        _wait_for(lambda: beat.dirty, "the row was not given back")
        assert [op[1] for op in kept.take()] == ["owner_spawn_total"]
    finally:
        assert journal.close()
    with Registry() as reg:
        assert [r[0] for r in store.read(reg._db, "k", 1)][-1] == seq


def test_no_carried_row_lands_after_the_heartbeat_stopped() -> None:
    """The teardown stops the heartbeat, then writes the final status itself: a commit
    after that carries nothing, and ``stop`` waits for a carried row in flight."""
    import time

    from tether.owner.heartbeat import Heartbeat

    with Registry() as reg:
        reg.upsert_session(key="k", name="", agent_command=["m"], agent_label="m", cwd="/")
    beat = Heartbeat("k", unresponsive_after=300.0, fields=lambda: {"owner_status": "stopping"})
    carried = beat.carry  # in flight: taken, not yet settled
    beat.changed(carried=True)
    taken = carried()
    assert taken is not None
    settled_at: list[float] = []

    def settle_later() -> None:
        time.sleep(0.2)
        settled_at.append(time.monotonic())
        taken[2](True)

    thread = threading.Thread(target=settle_later)
    thread.start()
    beat.stop()
    stopped_at = time.monotonic()
    thread.join()
    assert settled_at
    assert settled_at[0] <= stopped_at  # stop waited for the row in flight
    beat.changed(carried=True)
    assert beat.carry() is None  # and no commit carries one after it


def test_turns_back_to_back_leave_the_row_to_the_heartbeat_once_per_coalesce_window() -> None:
    """A row written a moment ago is not written again with the next commit: back to
    back turns (a commit each) would pay a row each. The heartbeat's thread is woken to
    write the latest once, COALESCE_S later, as before."""
    from tether.owner import heartbeat as hb

    with Registry() as reg:
        reg.upsert_session(key="k", name="", agent_command=["m"], agent_label="m", cwd="/")
    beat = hb.Heartbeat("k", unresponsive_after=300.0, fields=lambda: {"owner_status": "idle"})
    beat.changed(carried=True)
    first = beat.carry()
    assert first is not None
    first[2](True)
    assert not beat._wake.is_set()
    beat.changed(carried=True)  # the next turn, a moment later
    assert beat.carry() is None
    assert beat.dirty
    assert beat._wake.is_set()  # the heartbeat writes it, coalesced


def test_a_status_that_cannot_be_read_leaves_the_row_to_the_heartbeat() -> None:
    """A carry whose status snapshot raises hands everything back and holds no lock:
    the heartbeat's own write (which takes the same lock) still goes through."""
    from tether import metrics
    from tether.owner.heartbeat import Heartbeat

    with Registry() as reg:
        reg.upsert_session(key="k", name="", agent_command=["m"], agent_label="m", cwd="/")
    broken = {"now": True}

    def fields() -> dict[str, Any]:
        if broken["now"]:
            raise RuntimeError("mid-change")
        return {"owner_status": "idle"}

    kept = metrics.Deferred()
    beat = Heartbeat("k", unresponsive_after=300.0, fields=fields, kept=kept)
    kept.incr("owner_spawn_total")
    beat.changed(carried=True)
    with pytest.raises(RuntimeError):
        beat.carry()
    assert beat.dirty
    broken["now"] = False

    def write() -> None:
        with Registry() as reg:
            beat._write_row(reg)

    writing = threading.Thread(target=write, daemon=True)
    writing.start()
    writing.join(timeout=5)
    assert not writing.is_alive(), "the heartbeat's write waits on a lock left held"
    with Registry() as reg:
        assert reg.counters()["owner_spawn_total"] == 1
    assert _session_row("k").owner_status == "idle"
