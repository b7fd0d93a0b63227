"""The ACP-over-HTTP servers' bookkeeping: a stream waiting for an id nobody creates
leaves nothing behind."""

from __future__ import annotations

from tether.serve.acp_api import _Servers


def test_waiting_streams_leave_no_event_behind() -> None:
    servers = _Servers()
    first = servers.wait_for_birth("typo")
    assert servers.wait_for_birth("typo") is first  # two streams share one event
    servers.stop_waiting("typo")
    assert "typo" in servers._born  # the other stream still waits
    servers.stop_waiting("typo")
    assert servers._born == {}
    assert servers._waiting == {}


def test_a_created_server_wakes_its_waiting_stream() -> None:
    servers = _Servers()
    born = servers.wait_for_birth("s1")
    servers.close("s1")  # closing (or creating) tells the waiters
    assert born.is_set()
    servers.stop_waiting("s1")
    assert servers._born == {}
    assert servers._waiting == {}
