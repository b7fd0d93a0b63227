"""Small pure parts of the router's ACP routes and a fleet host's ``durable`` events."""

from __future__ import annotations

from tether.fleet.router_acp import server_id_of
from tether.serve.stream_clients import DURABLE_NONE_LOOKS, _Durable


def test_only_an_acp_server_path_names_a_server() -> None:
    assert server_id_of("/v1/acp/js-1") == "js-1"
    assert server_id_of("/v1/acp/") is None
    assert server_id_of("/v1/acp/a/b") is None
    assert server_id_of("/v1/sessions/x") is None


def test_durable_events_say_each_new_seq_once_and_carry_no_id() -> None:
    seqs: list[int | None] = [None, 3, 3, 7]
    durable = _Durable(lambda: seqs[0])
    assert durable.note() is None  # nothing shipped yet: nothing said
    assert durable.behind(3)
    seqs.pop(0)
    assert durable.note() == b'event: durable\ndata: {"durableSeq":3}\n\n'
    assert not durable.behind(3)
    seqs.pop(0)
    assert durable.note() is None  # unchanged
    seqs.pop(0)
    assert durable.note() == b'event: durable\ndata: {"durableSeq":7}\n\n'


def test_a_session_never_shipped_stops_being_looked_at() -> None:
    durable = _Durable(lambda: None)
    looks = 0
    while durable.behind(5) and looks < 1000:
        assert durable.note() is None
        looks += 1
    assert looks == DURABLE_NONE_LOOKS
