"""The ACP-over-HTTP servers' bookkeeping: a stream waiting for an id nobody creates
leaves nothing behind."""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

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


def _acp_paths(gateway: Any) -> set[str]:
    from tether.serve.app import routes

    return {r.path for r in routes(gateway) if getattr(r, "path", "").startswith("/v1/acp")}


def test_the_gateway_serves_acp_only_with_the_door_it_is_handed() -> None:
    """The gateway imports no ACP door: it mounts ``/v1/acp/{serverId}`` when the program
    hands it one (``tether serve`` always does), and not at all without."""
    from tether.serve.acp_binding import AcpBinding
    from tether.serve.app import Gateway

    bare = Gateway(token="t", config={}, heartbeat=15.0, ring_entries=16)
    assert _acp_paths(bare) == set()
    handed = AcpBinding(open_server=lambda _config, _agent: None, check_event_id=str)  # type: ignore[arg-type,return-value] -- never called here
    door = Gateway(token="t", config={}, heartbeat=15.0, ring_entries=16, acp=handed)
    assert _acp_paths(door) == {"/v1/acp/{serverId}"}


def test_the_program_hands_the_gateway_the_acp_door() -> None:
    """``tether serve`` runs the gateway with the ACP door's server factory and event-id
    check (what ``/v1/acp`` calls), taken by the program, above both doors."""
    from tether import program
    from tether.acp_door.channel import check_event_id, open_http_server

    handed: list[Any] = []
    with patch("tether.serve.command.run_serve", lambda _ctx, acp=None: handed.append(acp) or 0):
        assert program._serve(object()) == 0
    assert handed[0].open_server is open_http_server
    assert handed[0].check_event_id is check_event_id
