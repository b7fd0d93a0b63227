"""A host's membership: it registers before serving, beats with its capacity, drains,
leaves, and stops for good once a router has fenced it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from tests.fleet._pg import PostgresServer
from tether.errors import HostSuperseded, HostUnavailable, IndexUnavailable
from tether.fleet.index import FleetIndex
from tether.fleet.membership import HostMembership
from tether.fleet.placement import PlacementRequest, place

pytestmark = [pytest.mark.fleet, pytest.mark.integration]

INTERVAL = 0.05


def wait_for(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def reader(fleet_dsn: str) -> Iterator[FleetIndex]:
    with FleetIndex.connect(fleet_dsn) as ix:
        yield ix


def test_a_host_registers_beats_and_reports_capacity(fleet_dsn: str, reader: FleetIndex) -> None:
    count = [3]
    host = HostMembership(
        lambda: FleetIndex.connect(fleet_dsn),
        "h1",
        "http://127.0.0.1:9",
        labels={"zone": "a"},
        sessions=lambda: count[0],
        max_sessions=50,
        interval_s=INTERVAL,
    )
    epoch = host.start()
    try:
        row = reader.host("h1")
        assert row is not None
        assert (row.epoch, row.state, row.labels, row.sessions) == (epoch, "up", {"zone": "a"}, 3)
        assert row.memory_total
        assert row.memory_available is not None
        count[0] = 7
        wait_for(lambda: (reader.host("h1") or row).sessions == 7, "a beat with the new count")
        assert host.status().index_up
    finally:
        host.stop()
    gone = reader.host("h1")
    assert gone is not None
    assert (gone.state, gone.down_reason) == ("down", "stopped")


def test_a_draining_host_is_not_placed_on(fleet_dsn: str, reader: FleetIndex) -> None:
    hosts = [
        HostMembership(lambda: FleetIndex.connect(fleet_dsn), h, f"http://127.0.0.1/{h}",
                       interval_s=INTERVAL)
        for h in ("h1", "h2")
    ]  # fmt: skip
    for h in hosts:
        h.start()
    try:
        hosts[0].drain()
        for _ in range(3):
            assert place(reader.hosts(), PlacementRequest(), ttl_s=5).host_id == "h2"
        hosts[1].drain()
        with pytest.raises(HostUnavailable, match="draining"):
            place(reader.hosts(), PlacementRequest(), ttl_s=5)
        hosts[0].drain(False)
        assert place(reader.hosts(), PlacementRequest(), ttl_s=5).host_id == "h1"
    finally:
        for h in hosts:
            h.stop()


def test_a_fenced_host_stops_beating_and_is_told_once(fleet_dsn: str, reader: FleetIndex) -> None:
    told = threading.Event()
    calls: list[int] = []

    def superseded() -> None:
        calls.append(1)
        told.set()

    host = HostMembership(
        lambda: FleetIndex.connect(fleet_dsn),
        "h1",
        "http://127.0.0.1:9",
        interval_s=INTERVAL,
        on_superseded=superseded,
    )
    epoch = host.start()
    try:
        assert reader.fence_host("h1", epoch, "frozen") == epoch + 1
        assert told.wait(20)
        time.sleep(5 * INTERVAL)
        assert calls == [1]
        assert host.status().superseded
        row = reader.host("h1")
        assert row is not None
        assert (row.state, row.epoch) == ("down", epoch + 1)  # it did not undo the fence
        with pytest.raises(HostSuperseded):
            host.drain()
    finally:
        host.stop()
    row = reader.host("h1")
    assert row is not None
    assert row.down_reason == "frozen"  # leaving did not overwrite the fence's reason


def test_an_unreachable_index_at_start_is_said_before_serving(
    postgres: PostgresServer,
) -> None:
    dsn = postgres.dsn("postgres").replace(f"port={postgres.port}", "port=1")
    host = HostMembership(
        lambda: FleetIndex.connect(dsn, connect_timeout_s=2), "h1", "http://127.0.0.1:9"
    )
    with pytest.raises(IndexUnavailable):
        host.start()
