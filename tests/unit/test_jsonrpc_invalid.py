"""The answers to messages a JSON-RPC 2.0 server cannot take as requests (issue 21 item 11)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether.jsonrpc import JsonRpcConnection, ProtocolViolation
from tether.jsonrpc.invalid import reply_to_invalid, reply_to_oversized


def _violation(line: bytes, rpc: JsonRpcConnection | None = None) -> ProtocolViolation:
    rpc = rpc or JsonRpcConnection()
    rpc.receive_data(line + b"\n")
    event = rpc.next_event()
    assert isinstance(event, ProtocolViolation), event
    assert event.reason == "invalid-message"
    return event


def _reply(line: bytes, rpc: JsonRpcConnection | None = None) -> Any:
    event = _violation(line, rpc)
    data = reply_to_invalid(event.raw, event.detail)
    return None if data is None else json.loads(data)


@pytest.mark.parametrize(
    ("line", "code", "rid"),
    [
        (b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":"x"}', -32602, 1),
        (b'{"jsonrpc":"2.0","id":"a","method":5}', -32600, "a"),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"initialize"}', -32600, None),
        (b'{"jsonrpc":"2.0","id":{"a":1},"method":"initialize"}', -32600, None),
        (b'{"jsonrpc":"2.0","id":true,"method":"initialize"}', -32600, None),
        (b'{"jsonrpc":"1.0","id":7,"method":"initialize"}', -32600, 7),
        (b'{"jsonrpc":"2.0","id":8,"method":"x","result":1}', -32600, 8),
        (b"42", -32600, None),
        (b'"x"', -32600, None),
        (b"{}", -32600, None),
        (b"[]", -32600, None),
    ],
)
def test_each_invalid_request_gets_one_error_with_its_id_where_valid(
    line: bytes, code: int, rid: Any
) -> None:
    reply = _reply(line)
    assert reply == {
        "jsonrpc": "2.0",
        "id": rid,
        "error": {"code": code, "message": reply["error"]["message"]},
    }


def test_a_batch_gets_an_array_answering_each_member_but_its_notifications() -> None:
    reply = _reply(
        b'[{"jsonrpc":"2.0","id":1,"method":"session/list","params":{}},'
        b'{"jsonrpc":"2.0","method":"session/cancel","params":{}},'
        b'{"jsonrpc":"2.0","id":2.5,"method":"x"}, 3]'
    )
    assert [(r["id"], r["error"]["code"]) for r in reply] == [
        (1, -32600),
        (None, -32600),
        (None, -32600),
    ]
    assert _reply(b'[{"jsonrpc":"2.0","method":"session/cancel","params":{}}]') is None


def test_responses_and_notifications_are_never_answered() -> None:
    assert _reply(b'{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}') is None
    assert _reply(b'{"jsonrpc":"2.0","method":"session/cancel","params":"x"}') is None


def test_a_reused_unanswered_id_is_answered_with_null() -> None:
    rpc = JsonRpcConnection()
    rpc.receive_data(b'{"jsonrpc":"2.0","id":1,"method":"session/list","params":{}}\n')
    rpc.next_event()
    reply = _reply(b'{"jsonrpc":"2.0","id":1,"method":"session/list","params":{}}', rpc)
    assert reply["id"] is None
    assert reply["error"]["code"] == -32600


def test_an_oversized_request_is_answered_under_the_id_its_head_shows() -> None:
    rpc = JsonRpcConnection(max_frame_bytes=64)
    rpc.receive_data(b'{"jsonrpc":"2.0","id":"p","method":"session/prompt","params":{"x":"')
    rpc.receive_data(b"y" * 100 + b'"}}\n')
    event = rpc.next_event()
    assert isinstance(event, ProtocolViolation)
    assert event.reason == "oversized"
    reply = reply_to_oversized(event.excerpt, 64, event.length, "config promptMaxBytes")
    assert reply is not None
    answer = json.loads(reply)
    assert answer["id"] == "p"
    assert answer["error"]["code"] == -32600
    assert "over the limit of 64 (config promptMaxBytes)" in answer["error"]["message"]


@pytest.mark.parametrize(
    "head",
    [
        b'{"jsonrpc":"2.0","method":"session/prompt","params":{"id":3,',  # nested id
        b'{"jsonrpc":"2.0","id":4,"result":{"content":"',  # a response
        b"not json at all",
    ],
)
def test_an_oversized_line_without_a_request_id_in_its_head_gets_none(head: bytes) -> None:
    assert reply_to_oversized(head, 64, 100) is None
