"""JsonRpcConnection: the pending tables, cancellation, deadlines and teardown."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from tether.errors import LocalProtocolError
from tether.jsonrpc import (
    EOF,
    NEED_DATA,
    JsonRpcConnection,
    Notification,
    PendingRequest,
    ProtocolViolation,
    Request,
    Response,
    Stats,
)


def drain(conn: JsonRpcConnection) -> list[Any]:
    out: list[Any] = []
    while True:
        event = conn.next_event()
        if event is NEED_DATA or event is EOF:
            return out
        out.append(event)


def answer(conn: JsonRpcConnection, request_id: Any, result: Any) -> list[Any]:
    conn.receive_data(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode())
    conn.receive_data(b"\n")
    return drain(conn)


def decoded(line: bytes) -> Any:
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    return json.loads(line)


PROMPT = {"sessionId": "s1", "prompt": [{"type": "text", "text": "hi"}]}
CANCEL_S1 = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s1"}}


# --- outbound framing ----------------------------------------------------------------


def test_send_request_frames_and_records_pending() -> None:
    """A request is one compact line, and its pending entry records method, session and times."""
    conn = JsonRpcConnection()
    request_id, data = conn.send_request("session/prompt", PROMPT, now=10.0, deadline=70.0)
    assert request_id == 0
    assert data == (
        b'{"jsonrpc":"2.0","id":0,"method":"session/prompt","params":'
        b'{"sessionId":"s1","prompt":[{"type":"text","text":"hi"}]}}\n'
    )
    assert conn.pending == {0: PendingRequest(0, "session/prompt", "s1", 10.0, 70.0, False)}
    assert conn.next_id == 1


@pytest.mark.parametrize(
    ("method", "params", "session_id", "expected"),
    [
        pytest.param("session/prompt", PROMPT, None, "s1", id="prompt-defaults-from-params"),
        pytest.param("session/prompt", PROMPT, "other", "other", id="explicit-wins"),
        pytest.param("session/load", {"sessionId": "s1"}, None, None, id="only-prompt-defaults"),
        pytest.param("session/set_mode", None, "s2", "s2", id="explicit-on-other-method"),
    ],
)
def test_session_id_recorded(
    method: str, params: Any, session_id: str | None, expected: str | None
) -> None:
    """session/prompt takes its session from params unless one is given explicitly."""
    conn = JsonRpcConnection()
    request_id, _ = conn.send_request(method, params, now=0.0, session_id=session_id)
    assert conn.pending[request_id].session_id == expected


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"prompt": []}, id="no-session-id"),
        pytest.param({"sessionId": 5}, id="session-id-not-a-string"),
        pytest.param(None, id="no-params"),
    ],
)
def test_prompt_without_session_is_refused(params: Any) -> None:
    """A prompt we could never cancel is our bug, and consumes no id and no table entry."""
    conn = JsonRpcConnection()
    with pytest.raises(LocalProtocolError):
        conn.send_request("session/prompt", params, now=0.0)
    assert conn.pending == {}
    assert conn.next_id == 0


def test_unencodable_request_leaves_no_trace() -> None:
    """A request whose params cannot be encoded is not pending and does not use up its id."""
    conn = JsonRpcConnection()
    with pytest.raises(LocalProtocolError):
        conn.send_request("x", {"bad": object()}, now=0.0)
    assert (conn.pending, conn.next_id, conn.stats.frames_out) == ({}, 0, 0)
    assert conn.send_request("x", now=0.0)[0] == 0


def test_params_none_is_omitted() -> None:
    """Calls without params carry no params member at all."""
    conn = JsonRpcConnection()
    assert decoded(conn.send_request("authenticate", now=0.0)[1]) == {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "authenticate",
    }
    assert decoded(conn.send_notification("n")) == {"jsonrpc": "2.0", "method": "n"}
    assert decoded(conn.send_notification("n", {"a": 1})) == {
        "jsonrpc": "2.0",
        "method": "n",
        "params": {"a": 1},
    }


# --- the response path and the stale-id cascade -----------------------------------------


def test_response_resolves_and_removes_pending() -> None:
    """An answer to a pending id comes out once, with our method, and the entry is gone."""
    conn = JsonRpcConnection()
    request_id, _ = conn.send_request("initialize", {"protocolVersion": 1}, now=0.0)
    assert answer(conn, request_id, {"protocolVersion": 1}) == [
        Response(0, result={"protocolVersion": 1}, method="initialize")
    ]
    assert conn.pending == {}
    assert answer(conn, request_id, {"protocolVersion": 1}) == []
    assert conn.stats.stale_responses == 1


def test_stale_id_cascade(caplog: pytest.LogCaptureFixture) -> None:
    """A late answer to an abandoned prompt is dropped, so the next prompt gets its own answer."""
    conn = JsonRpcConnection()
    first, _ = conn.send_request("session/prompt", PROMPT, now=0.0, deadline=5.0)
    assert conn.expired(5.0) == [first]
    cancel = conn.abandon(first, reason="deadline")
    assert decoded(cancel) == CANCEL_S1
    second, _ = conn.send_request("session/prompt", PROMPT, now=6.0)
    assert second != first
    with caplog.at_level(logging.DEBUG, logger="tether.jsonrpc"):
        late = answer(conn, first, {"stopReason": "cancelled"})
    assert late == []
    assert conn.stats.stale_responses == 1
    assert "session/prompt abandoned: deadline" in caplog.text
    assert all(r.levelno == logging.DEBUG for r in caplog.records)
    assert answer(conn, second, {"stopReason": "end_turn"}) == [
        Response(second, {"stopReason": "end_turn"}, None, "session/prompt", "s1")
    ]
    assert conn.pending == {}


@pytest.mark.parametrize(
    "late_id",
    [
        pytest.param(99, id="never-sent"),
        pytest.param("0", id="string-of-a-pending-int"),
        pytest.param(-1, id="negative"),
    ],
)
def test_unknown_ids_are_stale(late_id: Any, caplog: pytest.LogCaptureFixture) -> None:
    """An answer whose id is not pending (exact type included) is dropped and counted."""
    conn = JsonRpcConnection()
    conn.send_request("initialize", now=0.0)
    with caplog.at_level(logging.DEBUG, logger="tether.jsonrpc"):
        assert answer(conn, late_id, {}) == []
    assert "not pending" in caplog.text
    assert conn.stats.stale_responses == 1
    assert list(conn.pending) == [0]


def test_ids_never_reused() -> None:
    """Ids count up across answers, abandons and fail_all; none is ever handed out twice."""
    conn = JsonRpcConnection()
    seen = []
    for round_ in range(3):
        a, _ = conn.send_request("x", now=0.0)
        b, _ = conn.send_request("y", now=0.0)
        c, _ = conn.send_request("z", now=0.0)
        answer(conn, a, None)
        conn.abandon(b, reason="gave up")
        if round_ == 1:
            conn.fail_all()
        seen += [a, b, c]
    assert seen == list(range(9))


def test_abandoned_reasons_memory_is_bounded() -> None:
    """Only the most recent abandoned ids keep a reason; older late answers are still dropped."""
    conn = JsonRpcConnection()
    for _ in range(300):
        request_id, _ = conn.send_request("x", now=0.0)
        conn.abandon(request_id, reason="r")
    assert len(conn._ours._abandoned) == 256  # the table moved to jsonrpc.pending
    assert answer(conn, 0, None) == []
    assert conn.stats.stale_responses == 1
    assert conn.stats.abandoned == 300


# --- cancellation ------------------------------------------------------------------------


def test_cancel_turn_then_abandon_sends_cancel_once() -> None:
    """session/cancel goes out on the first cancel_turn only, and abandon does not repeat it."""
    conn = JsonRpcConnection()
    prompt, _ = conn.send_request("session/prompt", PROMPT, now=0.0)
    assert decoded(conn.cancel_turn(prompt)) == CANCEL_S1
    assert conn.pending[prompt].cancel_sent
    assert conn.cancel_turn(prompt) == b""
    assert prompt in conn.pending
    assert conn.abandon(prompt, reason="cancel deadline") == b""
    assert (conn.stats.cancels_sent, conn.stats.abandoned) == (1, 1)


def test_abandon_then_cancel_turn_sends_cancel_once() -> None:
    """Abandoning a prompt sends its cancel; a later cancel_turn has nothing left to cancel."""
    conn = JsonRpcConnection()
    prompt, _ = conn.send_request("session/prompt", PROMPT, now=0.0)
    assert decoded(conn.abandon(prompt, reason="caller cancelled")) == CANCEL_S1
    assert conn.cancel_turn(prompt) == b""
    assert conn.abandon(prompt, reason="again") == b""
    assert (conn.stats.cancels_sent, conn.stats.abandoned) == (1, 1)


def test_cancelled_prompt_still_gets_its_answer() -> None:
    """After cancel_turn the agent's cancelled answer still resolves the prompt."""
    conn = JsonRpcConnection()
    prompt, _ = conn.send_request("session/prompt", PROMPT, now=0.0)
    conn.cancel_turn(prompt)
    assert answer(conn, prompt, {"stopReason": "cancelled"}) == [
        Response(prompt, {"stopReason": "cancelled"}, None, "session/prompt", "s1")
    ]
    assert conn.cancel_turn(prompt) == b""


def test_each_prompt_gets_its_own_cancel() -> None:
    """Cancelling is once per prompt, not once per session."""
    conn = JsonRpcConnection()
    a, _ = conn.send_request("session/prompt", PROMPT, now=0.0)
    conn.abandon(a, reason="deadline")
    b, _ = conn.send_request("session/prompt", PROMPT, now=0.0)
    assert decoded(conn.cancel_turn(b)) == CANCEL_S1
    assert conn.stats.cancels_sent == 2


def test_cancel_turn_on_non_prompt_is_a_local_error() -> None:
    """Only prompt turns can be cancelled with session/cancel; anything else is our bug."""
    conn = JsonRpcConnection()
    request_id, _ = conn.send_request("session/new", {"cwd": "/"}, now=0.0)
    with pytest.raises(LocalProtocolError):
        conn.cancel_turn(request_id)
    assert conn.cancel_turn(12345) == b""


def test_abandon_non_prompt_sends_nothing() -> None:
    """Abandoning a non-prompt request only forgets it, and is idempotent."""
    conn = JsonRpcConnection()
    request_id, _ = conn.send_request("session/new", {"cwd": "/"}, now=0.0)
    assert conn.abandon(request_id, reason="handshake timeout") == b""
    assert conn.abandon(request_id, reason="handshake timeout") == b""
    assert conn.abandon(777, reason="never existed") == b""
    assert (conn.pending, conn.stats.abandoned, conn.stats.cancels_sent) == ({}, 1, 0)


# --- deadlines and teardown ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        pytest.param(0.0, [], id="none-yet"),
        pytest.param(2.999, [], id="just-before"),
        pytest.param(3.0, [2], id="at-deadline-inclusive"),
        pytest.param(5.0, [1, 2], id="both-in-id-order"),
        pytest.param(1e9, [1, 2], id="no-deadline-never-expires"),
    ],
)
def test_expired(now: float, expected: list[int]) -> None:
    """expired names the pending ids whose deadline is at or before now, without removing them."""
    conn = JsonRpcConnection()
    conn.send_request("a", now=0.0)
    conn.send_request("b", now=0.0, deadline=5.0)
    conn.send_request("c", now=0.0, deadline=3.0)
    assert conn.expired(now) == expected
    assert len(conn.pending) == 3


def test_next_deadline() -> None:
    """next_deadline is the earliest deadline still pending, or None."""
    conn = JsonRpcConnection()
    assert conn.next_deadline() is None
    conn.send_request("a", now=0.0)
    assert conn.next_deadline() is None
    b, _ = conn.send_request("b", now=0.0, deadline=5.0)
    c, _ = conn.send_request("c", now=0.0, deadline=3.0)
    assert conn.next_deadline() == 3.0
    conn.abandon(c, reason="deadline")
    assert conn.next_deadline() == 5.0
    answer(conn, b, None)
    assert conn.next_deadline() is None


def test_fail_all_empties_the_table() -> None:
    """fail_all returns every pending request oldest first, and their answers become stale."""
    conn = JsonRpcConnection()
    conn.send_request("initialize", now=1.0)
    conn.send_request("session/prompt", PROMPT, now=2.0, deadline=9.0)
    failed = conn.fail_all()
    assert failed == [
        PendingRequest(0, "initialize", None, 1.0, None),
        PendingRequest(1, "session/prompt", "s1", 2.0, 9.0),
    ]
    assert conn.pending == {}
    assert conn.fail_all() == []
    assert answer(conn, 1, {"stopReason": "end_turn"}) == []
    assert conn.next_deadline() is None


def test_eof() -> None:
    """Buffered frames come out before EOF, EOF repeats, and data after it is our bug."""
    conn = JsonRpcConnection()
    conn.receive_data(b'{"method":"a"}\n{"method":"b"}')
    conn.receive_data(b"")
    assert conn.next_event() == Notification("a", None)
    assert conn.next_event() == Notification("b", None)
    assert conn.next_event() is EOF
    assert conn.next_event() is EOF
    with pytest.raises(LocalProtocolError):
        conn.receive_data(b"{}\n")


def test_oversized_frame_then_good_message() -> None:
    """An oversized line is one counted violation, and the message after it is delivered."""
    conn = JsonRpcConnection(max_frame_bytes=64)
    conn.receive_data(b'{"method":"x","params":{"pad":"' + b"p" * 100 + b'"}}\n{"method":"ok"}\n')
    events = drain(conn)
    assert [type(e) for e in events] == [ProtocolViolation, Notification]
    assert events[0].reason == "oversized"
    assert len(events[0].excerpt) <= 200
    assert events[1] == Notification("ok", None)
    assert (conn.stats.oversized, conn.stats.frames_in, conn.stats.malformed) == (1, 2, 0)


# --- incoming requests ----------------------------------------------------------------------


PERMISSION = (
    b'{"jsonrpc":"2.0","id":"p1","method":"session/request_permission",'
    b'"params":{"sessionId":"s1"}}\n'
)


def test_incoming_request_answered_exactly_once() -> None:
    """An incoming request is pending until answered, and answering it twice is our bug."""
    conn = JsonRpcConnection()
    conn.receive_data(PERMISSION)
    (request,) = drain(conn)
    assert request == Request("p1", "session/request_permission", {"sessionId": "s1"})
    assert conn.incoming_pending() == {"p1": request}
    data = conn.send_result("p1", {"outcome": {"outcome": "cancelled"}})
    assert decoded(data) == {
        "jsonrpc": "2.0",
        "id": "p1",
        "result": {"outcome": {"outcome": "cancelled"}},
    }
    assert conn.incoming_pending() == {}
    with pytest.raises(LocalProtocolError):
        conn.send_result("p1", None)
    with pytest.raises(LocalProtocolError):
        conn.send_error("p1", -32800, "cancelled")


@pytest.mark.parametrize(
    "bad_id",
    [
        pytest.param("nope", id="never-received"),
        pytest.param(None, id="null-not-pending"),
        pytest.param(True, id="bool"),
        pytest.param(["p1"], id="unhashable"),
    ],
)
def test_send_result_needs_an_incoming_request(bad_id: Any) -> None:
    """send_result only answers requests the peer actually sent and we have not answered."""
    conn = JsonRpcConnection()
    conn.receive_data(PERMISSION)
    drain(conn)
    with pytest.raises(LocalProtocolError):
        conn.send_result(bad_id, None)
    assert list(conn.incoming_pending()) == ["p1"]


def test_send_error_shapes_and_parse_error_with_null_id() -> None:
    """send_error answers an incoming request, and may report an unreadable line with id null."""
    conn = JsonRpcConnection()
    conn.receive_data(b'{"id":3,"method":"terminal/create"}\n')
    drain(conn)
    assert decoded(conn.send_error(3, -32800, "Request cancelled", {"why": "turn"})) == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32800, "message": "Request cancelled", "data": {"why": "turn"}},
    }
    assert decoded(conn.send_error(None, -32700, "Parse error")) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "Parse error"},
    }
    assert decoded(conn.send_error(None, -32700, "Parse error"))["id"] is None
    with pytest.raises(LocalProtocolError):
        conn.send_error(3, -32800, "again")
    with pytest.raises(LocalProtocolError):
        conn.send_error(None, True, "bool code")


def test_null_id_request_is_answered_by_send_error_none() -> None:
    """A request with id null is tracked like any other and answered once."""
    conn = JsonRpcConnection()
    conn.receive_data(b'{"id":null,"method":"m"}\n')
    assert drain(conn) == [Request(None, "m", None)]
    assert decoded(conn.send_result(None, 1)) == {"jsonrpc": "2.0", "id": None, "result": 1}
    assert conn.incoming_pending() == {}


def test_unencodable_answer_keeps_request_unanswered() -> None:
    """If our result cannot be encoded the request stays pending so we can still answer it."""
    conn = JsonRpcConnection()
    conn.receive_data(PERMISSION)
    drain(conn)
    with pytest.raises(LocalProtocolError):
        conn.send_result("p1", {"x": float("inf")})
    assert "p1" in conn.incoming_pending()
    conn.send_error("p1", -32603, "internal error")
    assert conn.incoming_pending() == {}


def test_duplicate_incoming_id_is_a_violation() -> None:
    """The peer reusing an id we have not answered is refused; once answered it may reuse it."""
    conn = JsonRpcConnection()
    conn.receive_data(PERMISSION + PERMISSION)
    first, second = drain(conn)
    assert isinstance(first, Request)
    assert isinstance(second, ProtocolViolation)
    assert second.reason == "invalid-message"
    assert "reused" in second.detail
    conn.send_result("p1", None)
    conn.receive_data(PERMISSION)
    assert drain(conn) == [first]


def test_views_are_read_only() -> None:
    """pending and incoming_pending cannot be mutated from outside."""
    conn = JsonRpcConnection()
    with pytest.raises(TypeError):
        conn.pending[0] = PendingRequest(0, "x", None, 0.0, None)  # type: ignore[index]
    with pytest.raises(TypeError):
        conn.incoming_pending()["x"] = Request("x", "m", None)  # type: ignore[index]


@pytest.mark.parametrize(
    "probe",
    [
        pytest.param(True, id="bool-equals-1"),
        pytest.param(1.0, id="float-equals-1"),
        pytest.param([1], id="unhashable-list"),
        pytest.param({"id": 1}, id="unhashable-dict"),
        pytest.param("1", id="string-of-int"),
    ],
)
def test_views_match_ids_by_exact_type(probe: Any) -> None:
    """Ids from peer input that merely compare equal to a pending id are not found, nor raise."""
    conn = JsonRpcConnection()
    conn.send_request("a", now=0.0)
    conn.send_request("b", now=0.0)
    conn.receive_data(b'{"id":1,"method":"m"}\n')
    drain(conn)
    for view in (conn.pending, conn.incoming_pending()):
        assert 1 in view
        assert probe not in view
        assert view.get(probe) is None
        with pytest.raises(KeyError):
            view[probe]
    assert list(conn.pending) == [0, 1]
    assert len(conn.incoming_pending()) == 1
    assert "PendingRequest(id=0" in repr(conn.pending)


def test_stats_count_frames_both_ways() -> None:
    """Every frame in and out is counted, including stale and bad ones."""
    conn = JsonRpcConnection()
    conn.send_request("a", now=0.0)
    conn.send_notification("b")
    conn.receive_data(b'{"id":0,"result":1}\n{"id":0,"result":1}\nbad\n{"id":5,"method":"c"}\n')
    drain(conn)
    conn.send_result(5, None)
    assert conn.stats == Stats(
        frames_in=4, frames_out=3, malformed=1, stale_responses=1, cancels_sent=0
    )


def test_pair_client_and_agent_over_memory() -> None:
    """Two endpoints joined by bytes complete a prompt turn with a permission round trip."""
    client, agent = JsonRpcConnection(), JsonRpcConnection()
    prompt_id, data = client.send_request("session/prompt", PROMPT, now=0.0)
    agent.receive_data(data)
    (prompt,) = drain(agent)
    assert prompt == Request(prompt_id, "session/prompt", PROMPT)
    perm_id, data = agent.send_request("session/request_permission", {"sessionId": "s1"}, now=0.0)
    client.receive_data(agent.send_notification("session/update", {"sessionId": "s1"}) + data)
    update, perm = drain(client)
    assert update == Notification("session/update", {"sessionId": "s1"})
    assert perm == Request(perm_id, "session/request_permission", {"sessionId": "s1"})
    agent.receive_data(client.send_result(perm_id, {"outcome": {"outcome": "selected"}}))
    assert drain(agent) == [
        Response(perm_id, {"outcome": {"outcome": "selected"}}, None, "session/request_permission")
    ]
    client.receive_data(agent.send_result(prompt_id, {"stopReason": "end_turn"}))
    assert drain(client) == [
        Response(prompt_id, {"stopReason": "end_turn"}, None, "session/prompt", "s1")
    ]
    assert client.pending == {}
    assert agent.pending == {}
    assert client.incoming_pending() == {}
    assert agent.incoming_pending() == {}
