"""The fleet index against a real PostgreSQL: migrations, epochs, fleet-wide ensure,
shipping. Each rule is enforced by the database, so each test races real connections
(threads, each with its own connection) rather than trusting one process's memory."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from tests.fleet._pg import PostgresServer
from tether.errors import FleetError, HostSuperseded, IndexUnavailable
from tether.fleet.index import Capacity, FleetIndex, Ownership, ShippedChunk, migrate
from tether.fleet.schema import MIGRATIONS

pytestmark = [pytest.mark.fleet, pytest.mark.integration]


@pytest.fixture
def connect(fleet_dsn: str) -> Iterator[Callable[[], FleetIndex]]:
    opened: list[FleetIndex] = []
    lock = threading.Lock()

    def _connect() -> FleetIndex:
        ix = FleetIndex.connect(fleet_dsn)
        with lock:
            opened.append(ix)
        return ix

    yield _connect
    for ix in opened:
        ix.close()


def _ensure(ix: FleetIndex, host: str, epoch: int, name: str = "work") -> tuple[str, bool]:
    row, created = ix.ensure_session(
        scope="u1", agent="mock", cwd="/w", name=name, host_id=host, host_epoch=epoch
    )
    return row.session_id, created


# --- migrations -------------------------------------------------------------------------


def test_migrations_are_versioned_and_run_once_even_when_raced(fleet_dsn: str) -> None:
    def one() -> int:
        with psycopg.connect(fleet_dsn, autocommit=True) as conn:
            return migrate(conn)

    with ThreadPoolExecutor(8) as pool:
        versions = list(pool.map(lambda _: one(), range(8)))
    assert versions == [len(MIGRATIONS)] * 8
    with psycopg.connect(fleet_dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT version FROM fleet_migrations ORDER BY version").fetchall()
    assert [r[0] for r in rows] == list(range(1, len(MIGRATIONS) + 1))


def test_an_index_newer_than_this_tether_is_refused(fleet_dsn: str) -> None:
    with psycopg.connect(fleet_dsn, autocommit=True) as conn:
        migrate(conn)
        conn.execute("INSERT INTO fleet_migrations (version) VALUES (%s)", (len(MIGRATIONS) + 1,))
        with pytest.raises(FleetError, match="newer than this Tether"):
            migrate(conn)


# --- hosts and epochs -------------------------------------------------------------------


def test_registering_again_bumps_the_epoch_and_fences_the_old_incarnation(
    connect: Callable[[], FleetIndex],
) -> None:
    ix = connect()
    first = ix.register_host("h1", "http://127.0.0.1:1", capacity=Capacity(sessions=2))
    ix.heartbeat("h1", first, Capacity(sessions=3))
    second = ix.register_host("h1", "http://127.0.0.1:2")
    assert second == first + 1
    with pytest.raises(HostSuperseded):
        ix.heartbeat("h1", first)  # a late beat of the old incarnation changes nothing
    host = ix.host("h1")
    assert host is not None
    assert (host.url, host.epoch, host.state) == ("http://127.0.0.1:2", second, "up")


def test_heartbeat_age_is_measured_by_the_index_clock(connect: Callable[[], FleetIndex]) -> None:
    ix = connect()
    epoch = ix.register_host("h1", "http://127.0.0.1:1")
    ix.heartbeat("h1", epoch, Capacity(sessions=5, memory_total=100, memory_available=40))
    (host,) = ix.hosts()
    assert 0 <= host.heartbeat_age_s < 5
    assert (host.sessions, host.memory_total, host.memory_available) == (5, 100, 40)


def test_of_routers_racing_to_fence_a_host_exactly_one_wins(
    connect: Callable[[], FleetIndex],
) -> None:
    epoch = connect().register_host("h1", "http://127.0.0.1:1")
    barrier = threading.Barrier(10)

    def fence(_: int) -> int | None:
        ix = connect()
        barrier.wait()
        return ix.fence_host("h1", epoch, "no heartbeat")

    with ThreadPoolExecutor(10) as pool:
        results = list(pool.map(fence, range(10)))
    winners = [r for r in results if r is not None]
    assert winners == [epoch + 1]
    ix = connect()
    host = ix.host("h1")
    assert host is not None
    assert (host.state, host.down_reason) == ("down", "no heartbeat")
    with pytest.raises(HostSuperseded):
        ix.heartbeat("h1", epoch)
    with pytest.raises(HostSuperseded):
        ix.heartbeat("h1", epoch + 1)  # down is down: a host comes back by registering


def test_a_draining_host_beats_but_takes_no_new_session(
    connect: Callable[[], FleetIndex],
) -> None:
    ix = connect()
    epoch = ix.register_host("h1", "http://127.0.0.1:1")
    existing, _ = _ensure(ix, "h1", epoch, "before")
    ix.set_draining("h1", epoch)
    ix.heartbeat("h1", epoch)
    with pytest.raises(HostSuperseded, match="draining"):
        _ensure(ix, "h1", epoch, "after")
    assert _ensure(ix, "h1", epoch, "before") == (existing, False)  # still routed


# --- fleet-wide ensure --------------------------------------------------------------------


def test_fifty_racing_ensures_create_one_session(connect: Callable[[], FleetIndex]) -> None:
    e1 = connect().register_host("h1", "http://127.0.0.1:1")
    e2 = connect().register_host("h2", "http://127.0.0.1:2")
    indexes = [connect() for _ in range(10)]
    barrier = threading.Barrier(50)

    def ensure(i: int) -> tuple[str, bool, str]:
        ix = indexes[i % 10]
        host, epoch = ("h1", e1) if i % 2 else ("h2", e2)
        barrier.wait()
        with _one_at_a_time[i % 10]:  # a connection is not shared between threads
            row, created = ix.ensure_session(
                scope="u1", agent="mock", cwd="/w", name="race", host_id=host, host_epoch=epoch
            )
        return row.session_id, created, row.host_id

    _one_at_a_time = [threading.Lock() for _ in range(10)]
    with ThreadPoolExecutor(50) as pool:
        results = list(pool.map(ensure, range(50)))
    assert len({sid for sid, _, _ in results}) == 1
    assert sum(created for _, created, _ in results) == 1
    assert len({host for _, _, host in results}) == 1
    assert len(connect().sessions()) == 1


def test_session_identity_is_scoped_and_ids_are_fleet_global(
    connect: Callable[[], FleetIndex],
) -> None:
    ix = connect()
    e1 = ix.register_host("h1", "http://127.0.0.1:1")
    e2 = ix.register_host("h2", "http://127.0.0.1:2")
    a, _ = ix.ensure_session(
        scope="u1", agent="mock", cwd="/w", name="n", host_id="h1", host_epoch=e1
    )
    b, _ = ix.ensure_session(
        scope="u2", agent="mock", cwd="/w", name="n", host_id="h2", host_epoch=e2
    )
    assert a.session_id != b.session_id  # same agent, cwd and name: another scope
    assert ix.end_session(a.session_id, "closed", "close")
    c, created = ix.ensure_session(
        scope="u1", agent="mock", cwd="/w", name="n", host_id="h2", host_epoch=e2
    )
    assert created
    assert c.session_id not in (a.session_id, b.session_id)
    assert not ix.end_session(a.session_id, "closed", "close")  # ends once


def test_ownership_fields_are_kept(connect: Callable[[], FleetIndex]) -> None:
    ix = connect()
    epoch = ix.register_host("h1", "http://127.0.0.1:1")
    parent, _ = ix.ensure_session(
        scope="u1", agent="mock", cwd="/w", name="p", host_id="h1", host_epoch=epoch
    )
    child, _ = ix.ensure_session(
        scope="u1",
        agent="mock",
        cwd="/w",
        name="c",
        host_id="h1",
        host_epoch=epoch,
        ownership=Ownership(
            owner_session_id=parent.session_id,
            spawned_by=parent.session_id,
            parent_session_id=parent.session_id,
            sandboxed=True,
        ),
    )
    again = ix.session(child.session_id)
    assert again is not None
    assert again.parent_session_id == parent.session_id
    assert again.sandboxed is True
    assert again.to_dict()["ownerSessionId"] == parent.session_id


# --- shipping -----------------------------------------------------------------------------


def _chunk(first: int, last: int) -> ShippedChunk:
    lines = b"".join(b'{"seq":%d}\n' % s for s in range(first, last + 1))
    return ShippedChunk(first_seq=first, last_seq=last, entries=last - first + 1, data=lines)


def test_shipping_is_idempotent_ordered_and_fenced_by_epoch(
    connect: Callable[[], FleetIndex],
) -> None:
    ix = connect()
    epoch = ix.register_host("h1", "http://127.0.0.1:1")
    sid, _ = _ensure(ix, "h1", epoch)
    assert ix.ship(sid, "h1", epoch, _chunk(1, 10)).durable_seq == 10
    retry = ix.ship(sid, "h1", epoch, _chunk(1, 10))
    assert (retry.durable_seq, retry.stored) == (10, False)
    # A hole (the journal's own discontinuity after an owner crash) is shipped as is.
    assert ix.ship(sid, "h1", epoch, _chunk(1048577, 1048580)).durable_seq == 1048580
    with pytest.raises(FleetError, match="overlaps"):
        ix.ship(sid, "h1", epoch, _chunk(5, 12))
    with pytest.raises(FleetError, match="different chunk"):
        ix.ship(sid, "h1", epoch, _chunk(1, 11))
    newer = ix.register_host("h1", "http://127.0.0.1:1")
    with pytest.raises(HostSuperseded):
        ix.ship(sid, "h1", epoch, _chunk(1048581, 1048590))  # the stale incarnation
    with pytest.raises(HostSuperseded):
        ix.ship(sid, "h1", newer, _chunk(1048581, 1048590))  # not re-adopted yet
    assert [s.session_id for s in ix.adopt_sessions("h1", newer)] == [sid]
    assert ix.ship(sid, "h1", newer, _chunk(1048581, 1048590)).durable_seq == 1048590
    with pytest.raises(HostSuperseded):
        ix.ship(sid, "h1", epoch, _chunk(1048591, 1048599))  # still the stale one
    chunks = ix.shipped(sid, after_seq=5)
    assert [(c.first_seq, c.last_seq) for c in chunks] == [
        (1, 10),
        (1048577, 1048580),
        (1048581, 1048590),
    ]
    seqs = [int(line[7:-1]) for c in chunks for line in c.data.splitlines()]
    assert seqs == sorted(set(seqs))  # in order, no duplicate
    session = ix.session(sid)
    assert session is not None
    assert session.durable_seq == 1048590


def test_racing_retries_of_one_chunk_store_it_once(connect: Callable[[], FleetIndex]) -> None:
    ix = connect()
    epoch = ix.register_host("h1", "http://127.0.0.1:1")
    sid, _ = _ensure(ix, "h1", epoch)
    indexes = [connect() for _ in range(6)]
    barrier = threading.Barrier(6)

    def ship(i: int) -> bool:
        barrier.wait()
        try:
            return indexes[i].ship(sid, "h1", epoch, _chunk(1, 100)).stored
        except FleetError:
            return False  # lost the row lock race and then saw it stored: also fine

    with ThreadPoolExecutor(6) as pool:
        stored = list(pool.map(ship, range(6)))
    assert stored.count(True) == 1
    assert len(ix.shipped(sid)) == 1


# --- the server going away ----------------------------------------------------------------


def test_an_unreachable_index_is_a_retryable_error_not_a_traceback(
    postgres: PostgresServer,
) -> None:
    dsn = postgres.dsn("postgres").replace(f"port={postgres.port}", "port=1")
    with pytest.raises(IndexUnavailable) as err:
        FleetIndex.connect(dsn, connect_timeout_s=2)
    assert err.value.retryable
    assert err.value.detail_code == "INDEX_UNAVAILABLE"


def test_postgres_down_then_back(postgres: PostgresServer) -> None:
    """Its own server, so stopping it disturbs no other test and nothing outlives it."""
    base = Path(tempfile.mkdtemp(prefix="tether-test-pg-"))
    server = PostgresServer(base / "cluster", postgres.bindir)
    try:
        server.init()
        server.start()
        dsn = server.create_database("down")
        ix = FleetIndex.connect(dsn)
        try:
            epoch = ix.register_host("h1", "http://127.0.0.1:1")
            server.stop()
            with pytest.raises(IndexUnavailable):
                ix.heartbeat("h1", epoch)
            server.start()
            with FleetIndex.connect(dsn) as again:  # a new connection once it is back
                again.heartbeat("h1", epoch)
                assert again.host("h1") is not None
        finally:
            ix.close()
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
