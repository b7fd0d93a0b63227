"""Shipping a host's committed journal to the index: byte for byte, idempotent, resumed
from the index's word after a lost answer, refused once the host is superseded."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator

import pytest

from tether import paths
from tether.errors import HostSuperseded
from tether.fleet.index import FleetIndex
from tether.fleet.shipper import JournalShipper
from tether.state._registry_journal import JournalReader
from tether.state.journal import store
from tether.state.journal.entry import body_of
from tether.state.registry import Registry

pytestmark = [pytest.mark.fleet, pytest.mark.integration]


def _entries(first: int, count: int) -> list[store.Stored]:
    return [
        store.stored(seq, time.time(), "acp", None, body_of({"n": seq, "pad": "x" * 50}))[0]
        for seq in range(first, first + count)
    ]


@pytest.fixture
def local() -> Iterator[sqlite3.Connection]:
    with Registry() as reg:
        reg.upsert_session(key="k1", name="", agent_command=["mock"], agent_label="mock", cwd="/")
    db = sqlite3.connect(paths.state_db(), isolation_level=None)
    try:
        yield db
    finally:
        db.close()


@pytest.fixture
def reader(local: sqlite3.Connection) -> Iterator[JournalReader]:
    with JournalReader(paths.state_db()) as journal:
        yield journal


@pytest.fixture
def index(fleet_dsn: str) -> Iterator[FleetIndex]:
    with FleetIndex.connect(fleet_dsn) as ix:
        yield ix


def _fleet_session(ix: FleetIndex) -> tuple[str, int]:
    epoch = ix.register_host("h1", "http://127.0.0.1:1")
    row, _ = ix.ensure_session(
        scope="u", agent="mock", cwd="/", name="", host_id="h1", host_epoch=epoch
    )
    ix.bind_local_key(row.session_id, "h1", epoch, "k1")
    return row.session_id, epoch


def _shipped_lines(ix: FleetIndex, sid: str) -> list[bytes]:
    return [line for c in ix.shipped(sid) for line in c.data.splitlines()]


def test_committed_entries_ship_byte_for_byte_in_few_chunks(
    local: sqlite3.Connection, reader: JournalReader, index: FleetIndex
) -> None:
    sid, epoch = _fleet_session(index)
    store.write_batch(local, "k1", _entries(1, 2500))
    store.write_batch(local, "k1", _entries(2501, 10))
    shipper = JournalShipper(index, reader, "h1", lambda: epoch, max_entries=1000)
    result = shipper.ship_session(sid, "k1")
    assert (result.durable_seq, result.entries, result.chunks) == (2510, 2510, 3)
    assert _shipped_lines(index, sid) == [line for _, line in store.read(local, "k1", 1)]
    again = shipper.ship_session(sid, "k1")
    assert (again.durable_seq, again.entries) == (2510, 0)


def test_a_lost_answer_is_found_shipped_and_shipping_resumes_after_it(
    local: sqlite3.Connection, reader: JournalReader, index: FleetIndex
) -> None:
    sid, epoch = _fleet_session(index)
    store.write_batch(local, "k1", _entries(1, 20))
    JournalShipper(index, reader, "h1", lambda: epoch).ship_session(sid, "k1")
    store.write_batch(local, "k1", _entries(21, 5))
    # A shipper that believes nothing was shipped (its answer was lost, or it restarted
    # with a stale cursor) finds out from the index and ships only what is new.
    stale = JournalShipper(index, reader, "h1", lambda: epoch)
    stale._durable[sid] = 3  # the cursor it had before the lost answer
    result = stale.ship_session(sid, "k1")
    assert result.durable_seq == 25
    lines = _shipped_lines(index, sid)
    assert len(lines) == 25
    assert len(set(lines)) == 25  # no duplicate


def test_a_hole_in_the_local_journal_is_shipped_as_it_is(
    local: sqlite3.Connection, reader: JournalReader, index: FleetIndex
) -> None:
    sid, epoch = _fleet_session(index)
    store.write_batch(local, "k1", _entries(1, 5))
    store.write_batch(local, "k1", _entries(store.RESERVE + 1, 5))  # after an owner crash
    result = JournalShipper(index, reader, "h1", lambda: epoch).ship_session(sid, "k1")
    assert result.durable_seq == store.RESERVE + 5
    seqs = [c.first_seq for c in index.shipped(sid)]
    assert seqs == sorted(seqs)
    assert len(_shipped_lines(index, sid)) == 10


def test_a_superseded_host_ships_nothing(
    local: sqlite3.Connection, reader: JournalReader, index: FleetIndex
) -> None:
    sid, epoch = _fleet_session(index)
    store.write_batch(local, "k1", _entries(1, 5))
    shipper = JournalShipper(index, reader, "h1", lambda: epoch)
    shipper.ship_session(sid, "k1")
    assert index.fence_host("h1", epoch, "frozen") == epoch + 1
    store.write_batch(local, "k1", _entries(6, 5))
    with pytest.raises(HostSuperseded):
        shipper.ship_session(sid, "k1")
    session = index.session(sid)
    assert session is not None
    assert session.durable_seq == 5
