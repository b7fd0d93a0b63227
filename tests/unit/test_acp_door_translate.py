"""The ACP front door's translations: schema-valid frames from Tether's records, no I/O."""

from __future__ import annotations

from typing import Any

import pytest
from tests.acp_schema import schema_errors, validate_def

from tether.acp_door import questions, translate
from tether.errors import AgentRequestError, NoSession, TetherError, UsageError
from tether.ipc import protocol


def _answer(method: str, result: dict[str, Any]) -> list[str]:
    return schema_errors({"jsonrpc": "2.0", "id": 1, "result": result}, "agent", method)


def _update(params: dict[str, Any]) -> list[str]:
    frame = {"jsonrpc": "2.0", "method": "session/update", "params": params}
    return schema_errors(frame, "agent")


def test_initialize_result_is_a_valid_initialize_response() -> None:
    """The initialize answer advertises load, list/resume/close and the extensions."""
    result = translate.initialize_result("mock", {"image": True, "bogus": "x"})
    assert _answer("initialize", result) == []
    caps = result["agentCapabilities"]
    assert caps["loadSession"] is True
    assert caps["promptCapabilities"]["image"] is True
    assert "bogus" not in caps["promptCapabilities"]
    assert caps["_meta"]["tether"]["extensions"] == [
        "_tether/session/terminate",
        "_tether/session/ended",
    ]


def _entry(kind: str, **fields: Any) -> dict[str, Any]:
    return {"seq": 1, "at": 0.0, "kind": kind, **fields}


@pytest.mark.parametrize(
    ("entry", "kinds"),
    [
        pytest.param(
            _entry(
                "acp",
                direction="out",
                frame={
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "session/prompt",
                    "params": {
                        "sessionId": "agent-sid",
                        "prompt": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                    },
                },
            ),
            ["user_message_chunk", "user_message_chunk"],
            id="prompt-becomes-user-chunks",
        ),
        pytest.param(
            _entry(
                "acp",
                direction="in",
                frame={
                    "jsonrpc": "2.0",
                    "method": "session/update",
                    "params": {
                        "sessionId": "agent-sid",
                        "update": {
                            "sessionUpdate": "agent_message_chunk",
                            "content": {"type": "text", "text": "hi"},
                        },
                    },
                },
            ),
            ["agent_message_chunk"],
            id="update-is-itself",
        ),
        pytest.param(
            _entry("acp", direction="in", frame={"jsonrpc": "2.0", "id": 3, "result": {}}),
            [],
            id="answer-stands-for-nothing",
        ),
        pytest.param(_entry("turn_started"), [], id="control-stands-for-nothing"),
        pytest.param(
            _entry("acp", direction="in", frame={"method": "session/update", "params": 1}),
            [],
            id="malformed-update-is-skipped",
        ),
    ],
)
def test_updates_of_entry(entry: dict[str, Any], kinds: list[str]) -> None:
    """A journal entry stands for these updates, each valid in a session/update."""
    updates = translate.updates_of_entry(entry)
    assert [u["sessionUpdate"] for u in updates] == kinds
    for update in updates:
        assert _update({"sessionId": "tether-key", "update": update}) == []


def test_relayed_update_carries_the_doors_session_id() -> None:
    """An agent's update is relayed with Tether's session key as its sessionId."""
    frame = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": "agent-sid", "update": {"sessionUpdate": "plan", "entries": []}},
    }
    relayed = translate.relayed_update(frame, "tether-key")
    assert relayed is not None
    assert relayed["sessionId"] == "tether-key"
    assert _update(relayed) == []
    assert translate.relayed_update({"method": "_x/y", "params": {}}, "k") is None


def _records(n: int, cwd: str = "/p") -> list[dict[str, Any]]:
    return [{"key": f"k{i}", "name": f"s{i}", "cwd": cwd, "createdAt": float(i)} for i in range(n)]


def test_list_pages_cover_every_session_once_in_order() -> None:
    """Following nextCursor yields every session once, oldest first; the last page has none."""
    records = _records(5)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page, cursor = translate.list_page(records, cwd=None, cursor=cursor, size=2)
        pages += 1
        assert _answer("session/list", {"sessions": page, "nextCursor": cursor}) == []
        seen += [s["sessionId"] for s in page]
        if cursor is None:
            break
    assert seen == ["k0", "k1", "k2", "k3", "k4"]
    assert pages == 3


def test_list_filters_by_cwd_and_refuses_an_unknown_cursor() -> None:
    """cwd filters; a cursor naming no session is a usage error (invalid params)."""
    records = [*_records(2), {"key": "x", "name": "", "cwd": "/other", "createdAt": 9.0}]
    page, cursor = translate.list_page(records, cwd="/other", cursor=None)
    assert [s["sessionId"] for s in page] == ["x"]
    assert page[0]["title"] is None
    assert cursor is None
    with pytest.raises(UsageError):
        translate.list_page(records, cwd=None, cursor="gone")


def test_ended_params_take_seed_004s_fields() -> None:
    """_tether/session/ended carries reason, terminatedBy, message, exitCode, stderr."""
    params = translate.ended_params(
        "k", {"reason": "terminated", "terminatedBy": "daemon", "message": "m", "exitCode": 0}
    )
    assert params == {
        "sessionId": "k",
        "reason": "terminated",
        "terminatedBy": "daemon",
        "message": "m",
        "exitCode": 0,
        "stderr": None,
    }
    closed = translate.ended_params("k", {"reason": "closed", "exitCode": True, "stderr": "e"})
    assert closed["exitCode"] is None
    assert closed["stderr"] == "e"
    frame = {"jsonrpc": "2.0", "method": translate.ENDED_METHOD, "params": params}
    assert schema_errors(frame, "agent") == []


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        pytest.param(NoSession("no"), -32002, id="no-session-not-found"),
        pytest.param(UsageError("bad"), -32602, id="usage-invalid-params"),
        pytest.param(
            AgentRequestError("refused", acp={"code": -32000, "message": "auth"}),
            -32000,
            id="agent-error-passed-through",
        ),
        pytest.param(TetherError("boom"), -32603, id="tether-internal"),
        pytest.param(RuntimeError("x"), -32603, id="foreign-internal"),
    ],
)
def test_error_for(exc: BaseException, code: int) -> None:
    """Each exception becomes one JSON-RPC error with a code the client can act on."""
    got, message, _data = translate.error_for(exc)
    assert got == code
    assert message
    frame = {"jsonrpc": "2.0", "id": 1, "error": {"code": got, "message": message}}
    assert schema_errors(frame, "agent", "session/prompt") == []


def test_terminate_requests_take_an_optional_requester_object() -> None:
    """The IPC `terminate` kind: `by` is an object when given; anything else is refused."""
    ok = protocol.parse_request(protocol.request_frame("r-1", "terminate", {"by": {"door": "cli"}}))
    assert ok.kind == "terminate"
    with pytest.raises(protocol.IpcRejected) as err:
        protocol.parse_request(protocol.request_frame("r-2", "terminate", {"by": "me"}))
    assert err.value.detail_code == "QUEUE_PROTOCOL_MALFORMED_MESSAGE"


def test_elicitations_are_put_only_in_a_mode_the_client_advertised() -> None:
    assert questions.elicitation_modes({}) == frozenset()
    assert questions.elicitation_modes({"elicitation": None}) == frozenset()
    assert questions.elicitation_modes({"elicitation": {"form": {}, "url": None}}) == {"form"}
    item = {
        "id": "i-1",
        "question": "elicitation",
        "mode": "form",
        "message": "name?",
        "requestedSchema": {"type": "object", "properties": {}},
        "turn": "r-1",
        "openedAt": 1.0,
    }
    params = questions.elicitation_request("s-1", item, frozenset({"form"}))
    assert params == {
        "sessionId": "s-1",
        "mode": "form",
        "message": "name?",
        "requestedSchema": {"type": "object", "properties": {}},
    }
    assert validate_def("CreateElicitationRequest", params) == []
    assert questions.elicitation_request("s-1", item, frozenset({"url"})) is None
    assert (
        questions.elicitation_request(
            "s-1", {**item, "question": "permission"}, frozenset({"form"})
        )
        is None
    )
    assert questions.elicitation_answer({"action": "accept", "content": {"a": 1}}) == (
        "accept",
        {"a": 1},
    )
    assert questions.elicitation_answer({"action": "decline"}) == ("decline", None)
    assert questions.elicitation_answer({"action": "something new"}) == ("cancel", None)
    assert questions.elicitation_answer(None) == ("cancel", None)
