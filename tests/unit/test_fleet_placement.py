"""Placement of new sessions: a pure function over host rows."""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg", reason="tether.fleet needs the fleet extra")

from tether.errors import HostUnavailable
from tether.fleet.index import HostRow
from tether.fleet.placement import PlacementRequest, place, why_not

TTL = 5.0


def host(hid: str, **kw: object) -> HostRow:
    base: dict[str, object] = {
        "host_id": hid,
        "url": f"http://127.0.0.1/{hid}",
        "epoch": 1,
        "state": "up",
        "labels": {},
        "sessions": 0,
        "max_sessions": None,
        "memory_total": None,
        "memory_available": None,
        "heartbeat_age_s": 0.1,
    }
    base.update(kw)
    return HostRow(**base)  # type: ignore[arg-type]


def test_least_loaded_by_the_higher_of_memory_and_sessions() -> None:
    busy_memory = host("a", sessions=1, memory_total=100, memory_available=10)
    busy_sessions = host("b", sessions=90, max_sessions=100, memory_total=100, memory_available=90)
    light = host("c", sessions=30, max_sessions=100, memory_total=100, memory_available=60)
    assert place([busy_memory, busy_sessions, light], PlacementRequest(), ttl_s=TTL).host_id == "c"


def test_ties_break_by_sessions_then_id() -> None:
    hosts = [host("b", sessions=2), host("a", sessions=2), host("c", sessions=1)]
    assert place(hosts, PlacementRequest(), ttl_s=TTL).host_id == "c"
    assert place(hosts[:2], PlacementRequest(), ttl_s=TTL).host_id == "a"


def test_children_go_next_to_their_parent_unless_it_cannot_take_them() -> None:
    hosts = [host("a", sessions=50), host("b", sessions=0)]
    assert place(hosts, PlacementRequest(parent_host="a"), ttl_s=TTL).host_id == "a"
    near_off = PlacementRequest(parent_host="a", near_parent=False)
    assert place(hosts, near_off, ttl_s=TTL).host_id == "b"
    full = [host("a", sessions=5, max_sessions=5), host("b")]
    assert place(full, PlacementRequest(parent_host="a"), ttl_s=TTL).host_id == "b"


def test_labels_are_constraints() -> None:
    hosts = [host("a", labels={"zone": "x"}), host("b", labels={"zone": "y", "gpu": "1"})]
    want = PlacementRequest(labels={"zone": "y"})
    assert place(hosts, want, ttl_s=TTL).host_id == "b"
    assert why_not(hosts[0], want, TTL) == "label zone='x', not 'y'"


def test_no_eligible_host_says_why_for_each() -> None:
    hosts = [
        host("a", state="draining"),
        host("b", heartbeat_age_s=9.0),
        host("c", state="down"),
        host("d", sessions=3, max_sessions=3),
    ]
    with pytest.raises(HostUnavailable) as err:
        place(hosts, PlacementRequest(), ttl_s=TTL)
    assert err.value.retryable
    assert err.value.fields["hosts"] == {
        "a": "draining",
        "b": "no heartbeat for 9.0 s",
        "c": "down",
        "d": "full (3/3 sessions)",
    }
    with pytest.raises(HostUnavailable, match="no hosts"):
        place([], PlacementRequest(), ttl_s=TTL)
