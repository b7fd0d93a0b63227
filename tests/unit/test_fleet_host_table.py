"""What a router remembers of a host that refused a connection (no index, no sockets).

A refusal is the refusing process's: a drained host that restarts registers again (a
new epoch, most often a new address), and the router judges the new process afresh.
Remembered across the restart, the router served the restarted host's sessions' reads
from the index -- behind the live journal by up to a shipping interval -- so a turn its
client had just seen end read back with no stop reason (the rolling-restart flake of
tests/fleet/test_drain.py)."""

from __future__ import annotations

from typing import Any

from tether.fleet.host_table import HostTable
from tether.fleet.rows import HostRow


def _row(url: str, epoch: int, state: str = "up") -> HostRow:
    return HostRow(
        host_id="h1",
        url=url,
        epoch=epoch,
        state=state,
        labels={},
        sessions=0,
        max_sessions=None,
        memory_total=None,
        memory_available=None,
        heartbeat_age_s=0.0,
    )


class _Index:
    """The index as far as :meth:`HostTable.refresh` reads it: the hosts' rows."""

    def __init__(self, *rows: HostRow) -> None:
        self.rows = list(rows)

    def hosts(self) -> list[HostRow]:
        return self.rows

    def close(self) -> None:
        pass


def _table(index: _Index) -> HostTable:
    connect: Any = lambda: index  # noqa: E731 -- the stand-in for FleetIndex.connect
    table = HostTable(connect, refresh_s=3600.0)
    table.refresh()
    return table


def test_a_refusal_is_remembered_for_the_host_that_refused() -> None:
    """The same registration (url, epoch) stays refused within the TTL, with its reason."""
    old = _row("http://127.0.0.1:1001", epoch=1)
    table = _table(_Index(old))
    table.mark_refused(old, "connection refused")
    assert table.refused("h1") is not None
    assert table.refused_why("h1") == "connection refused"
    table.refresh()  # the index still says the same: still refused
    assert table.refused("h1") is not None


def test_a_host_registered_again_is_not_held_to_its_old_process_refusal() -> None:
    """The host restarted (new epoch and address): its old refusal no longer counts."""
    old = _row("http://127.0.0.1:1001", epoch=1)
    index = _Index(old)
    table = _table(index)
    table.mark_refused(old, "connection refused")
    assert table.refused("h1") is not None
    index.rows = [_row("http://127.0.0.1:2002", epoch=2)]
    table.refresh()
    assert table.refused("h1") is None
    assert table.refused_why("h1") == ""


def test_a_host_registered_again_at_the_same_address_is_judged_afresh() -> None:
    """A restart on a fixed port is a new epoch: the old refusal no longer counts."""
    old = _row("http://127.0.0.1:1001", epoch=1)
    index = _Index(old)
    table = _table(index)
    table.mark_refused(old)
    index.rows = [_row("http://127.0.0.1:1001", epoch=2)]
    table.refresh()
    assert table.refused("h1") is None
