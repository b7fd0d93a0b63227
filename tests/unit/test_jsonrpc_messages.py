"""Classifying inbound lines into events, and encoding outbound ones."""

from __future__ import annotations

import json
from typing import Any

import pytest

import tether.jsonrpc
from tether.errors import LocalProtocolError, RemoteProtocolError
from tether.jsonrpc import (
    EOF,
    NEED_DATA,
    Event,
    JsonRpcConnection,
    Notification,
    ProtocolViolation,
    Request,
    Response,
    encode,
)


def connection_with_pending() -> JsonRpcConnection:
    """A client that has sent `initialize` (id 0) and a prompt for session s1 (id 1)."""
    conn = JsonRpcConnection()
    conn.send_request("initialize", {"protocolVersion": 1}, now=0.0)
    conn.send_request("session/prompt", {"sessionId": "s1", "prompt": []}, now=0.0)
    return conn


def classify(line: bytes) -> Event:
    conn = connection_with_pending()
    conn.receive_data(line + b"\n")
    event = conn.next_event()
    assert event is not NEED_DATA
    assert event is not EOF
    return event


RESULT = {"stopReason": "end_turn"}
ERROR = {"code": -32603, "message": "boom"}


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param(
            b'{"jsonrpc":"2.0","id":5,"method":"fs/read_text_file","params":{"path":"/a"}}',
            Request(5, "fs/read_text_file", {"path": "/a"}),
            id="request-int-id",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":"abc","method":"m","params":[1]}',
            Request("abc", "m", [1]),
            id="request-string-id-array-params",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":null,"method":"m"}',
            Request(None, "m", None),
            id="request-null-id-no-params",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":7,"method":"m","params":null}',
            Request(7, "m", None),
            id="request-null-params",
        ),
        pytest.param(b'{"id":7,"method":"m"}', Request(7, "m", None), id="request-no-jsonrpc"),
        pytest.param(
            b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1"}}',
            Notification("session/update", {"sessionId": "s1"}),
            id="notification",
        ),
        pytest.param(b'{"method":"_x/y"}', Notification("_x/y", None), id="notification-bare"),
        pytest.param(
            b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}',
            Response(0, result={"protocolVersion": 1}, method="initialize"),
            id="response-result",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}}',
            Response(1, result=RESULT, method="session/prompt", session_id="s1"),
            id="response-to-prompt-carries-session",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":"boom"}}',
            Response(0, error=ERROR, method="initialize"),
            id="response-error",
        ),
        pytest.param(
            b'{"id":0,"result":null}',
            Response(0, result=None, method="initialize"),
            id="response-null-result-no-jsonrpc",
        ),
        pytest.param(
            b'{"id":0,"result":{"stopReason":"end_turn"},"error":null}',
            Response(0, result=RESULT, method="initialize"),
            id="jsonrpc-1.0-style-null-error",
        ),
        pytest.param(
            b'{"id":0,"result":null,"error":{"code":-32603,"message":"boom"}}',
            Response(0, error=ERROR, method="initialize"),
            id="jsonrpc-1.0-style-null-result",
        ),
    ],
)
def test_classification_of_messages(line: bytes, expected: Event) -> None:
    """Each well-shaped line becomes the matching event, with responses routed by pending id."""
    event = classify(line)
    assert event == expected
    assert type(event) is type(expected)
    assert not isinstance(event, ProtocolViolation)
    assert event.raw == json.loads(line)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        pytest.param(b'{"id":1.5,"method":"m"}', "invalid-message", id="float-request-id"),
        pytest.param(b'{"id":true,"method":"m"}', "invalid-message", id="bool-request-id"),
        pytest.param(b'{"id":0.0,"result":1}', "invalid-message", id="float-id-never-matches-0"),
        pytest.param(b'{"id":false,"result":1}', "invalid-message", id="bool-id-never-matches-0"),
        pytest.param(b'{"id":{},"result":1}', "invalid-message", id="object-id"),
        pytest.param(b'{"jsonrpc":"1.0","method":"m"}', "invalid-message", id="wrong-version"),
        pytest.param(b"[1,2]", "invalid-message", id="top-level-array"),
        pytest.param(b"42", "invalid-message", id="top-level-number"),
        pytest.param(b'"hello"', "invalid-message", id="top-level-string"),
        pytest.param(b'{"method":3}', "invalid-message", id="method-not-string"),
        pytest.param(b'{"id":2,"method":"m","result":1}', "invalid-message", id="call-with-result"),
        pytest.param(b'{"method":"m","params":3}', "invalid-message", id="scalar-params"),
        pytest.param(
            b'{"id":0,"result":1,"error":{"code":1,"message":"x"}}',
            "invalid-message",
            id="result-and-error",
        ),
        pytest.param(b'{"id":0}', "invalid-message", id="response-without-result"),
        pytest.param(b'{"id":0,"error":null}', "invalid-message", id="response-null-error-only"),
        pytest.param(b'{"id":0,"error":"boom"}', "invalid-message", id="error-not-object"),
        pytest.param(b'{"id":null,"result":1}', "invalid-message", id="result-with-null-id"),
        pytest.param(
            b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}',
            "peer-error",
            id="error-with-null-id",
        ),
        pytest.param(b'{"jsonrpc":"2.0"}', "invalid-message", id="neither-method-nor-id"),
        pytest.param(b'{"id":', "malformed-json", id="truncated-json"),
        pytest.param(b'{"id":NaN,"result":1}', "malformed-json", id="nan-is-not-json"),
        pytest.param(b'{"a":-Infinity}', "malformed-json", id="infinity-is-not-json"),
        pytest.param(b"{} trailing", "malformed-json", id="trailing-garbage"),
        pytest.param(b"[" * 100_000, "malformed-json", id="nesting-too-deep"),
        pytest.param(b'{"id":' + b"1" * 5000 + b"}", "malformed-json", id="huge-integer"),
        pytest.param(b"\xef\xbb\xbf{}", "malformed-json", id="utf8-bom"),
        pytest.param(b"Loading model...", "malformed-json", id="stray-log-line"),
        pytest.param(b'{"a":"\xff"}', "not-utf8", id="invalid-utf8"),
        pytest.param('{"method":"m"}'.encode("utf-16"), "not-utf8", id="utf16"),
    ],
)
def test_classification_of_violations(line: bytes, reason: str) -> None:
    """Lines that are not usable messages become violations with a reason, never exceptions."""
    event = classify(line)
    assert isinstance(event, ProtocolViolation)
    assert event.reason == reason
    assert event.excerpt == line[:200]
    assert event.detail


def test_violations_are_counted_and_connection_stays_usable() -> None:
    """After any violation the next good line is still delivered, and each kind is counted."""
    conn = connection_with_pending()
    conn.receive_data(
        b"not json\n"
        b'{"id":null,"error":{"code":-32700,"message":"Parse error"}}\n'
        b'{"method":"session/update"}\n'
    )
    reasons = []
    for _ in range(2):
        event = conn.next_event()
        assert isinstance(event, ProtocolViolation)
        reasons.append(event.reason)
    assert reasons == ["malformed-json", "peer-error"]
    assert conn.next_event() == Notification("session/update", None)
    assert conn.next_event() is NEED_DATA
    assert (conn.stats.malformed, conn.stats.peer_errors, conn.stats.frames_in) == (1, 1, 3)


def test_violation_keeps_decoded_value_and_converts_to_remote_error() -> None:
    """A violation carries the decoded JSON and can be raised as a RemoteProtocolError."""
    event = classify(b'{"method":"m","params":3}')
    assert isinstance(event, ProtocolViolation)
    assert event.raw == {"method": "m", "params": 3}
    error = event.to_error()
    assert isinstance(error, RemoteProtocolError)
    assert error.fields == {"reason": "invalid-message", "excerpt": '{"method":"m","params":3}'}


def test_excerpt_is_at_most_200_bytes() -> None:
    """A long bad line is quoted by its first 200 bytes only."""
    event = classify(b"x" * 5000)
    assert isinstance(event, ProtocolViolation)
    assert event.excerpt == b"x" * 200


def test_raw_keeps_unknown_fields_for_relaying() -> None:
    """The decoded frame, unknown fields and _meta included, travels with the event."""
    line = b'{"jsonrpc":"2.0","method":"session/update","params":{},"_meta":{"k":1}}'
    event = classify(line)
    assert isinstance(event, Notification)
    assert event.raw == {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {},
        "_meta": {"k": 1},
    }


def test_response_is_error() -> None:
    """is_error is true exactly when the peer sent an error object."""
    assert Response(1, error={"code": 1, "message": "x"}).is_error
    assert not Response(1, result=None).is_error


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param({"a": 1, "b": [1, 2]}, b'{"a":1,"b":[1,2]}\n', id="compact"),
        pytest.param({"t": "é✓"}, '{"t":"é✓"}\n'.encode(), id="utf8-not-escaped"),
        pytest.param({"t": "\ud800"}, b'{"t":"\\ud800"}\n', id="lone-surrogate-ascii-escaped"),
    ],
)
def test_encode(obj: Any, expected: bytes) -> None:
    """encode writes one compact UTF-8 line that decodes back to the same object."""
    assert encode(obj) == expected
    assert json.loads(expected) == obj


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param({"x": float("nan")}, id="nan"),
        pytest.param({"x": object()}, id="not-serialisable"),
        pytest.param({1.5j: 1}, id="bad-key"),
    ],
)
def test_encode_refuses_non_json(obj: Any) -> None:
    """Objects JSON cannot express are our bug, reported as LocalProtocolError."""
    with pytest.raises(LocalProtocolError):
        encode(obj)


def test_exported_members() -> None:
    """The package's public names are pinned, so removing one is a deliberate act."""
    assert tether.jsonrpc.__all__ == [
        "DEFAULT_MAX_FRAME_BYTES",
        "EOF",
        "INTERNAL_ERROR",
        "INVALID_PARAMS",
        "INVALID_REQUEST",
        "METHOD_NOT_FOUND",
        "NEED_DATA",
        "PARSE_ERROR",
        "REQUEST_CANCELLED",
        "Event",
        "JsonRpcConnection",
        "LineFramer",
        "Notification",
        "Oversized",
        "PendingRequest",
        "ProtocolViolation",
        "Request",
        "RequestId",
        "Response",
        "Stats",
        "ViolationReason",
        "encode",
        "is_valid_id",
    ]
    assert repr(tether.jsonrpc.NEED_DATA) == "NEED_DATA"
    for name in tether.jsonrpc.__all__:
        assert hasattr(tether.jsonrpc, name)
