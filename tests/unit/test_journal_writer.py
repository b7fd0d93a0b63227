"""The journal writer under a disk that cannot keep up: memory stays bounded."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from tether import paths
from tether.journal import store, writer
from tether.registry import Registry


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
    from tether.journal.entry import acp_body, entry_line

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
