"""`tether mcp`'s protocol core, every reply validated by the official MCP SDK's types."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp_types import jsonrpc_message_adapter
from mcp_types.methods import validate_client_request, validate_server_result

from tether.errors import VisibilityDenied
from tether.mcp.server import SUPPORTED_VERSIONS, McpServer, Tool, ToolError, serve
from tether.mcp.tools import build_tools

VERSION = "2025-11-25"


def _echo(args: dict[str, Any]) -> dict[str, Any]:
    if args.get("fail") == "tool":
        raise ToolError("the tool failed")
    if args.get("fail") == "denied":
        raise VisibilityDenied("send of session k denied: visibility is tree", rule="tree")
    return {"echo": args.get("text")}


ECHO = Tool(
    "echo",
    "Echo text.",
    {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    _echo,
)


def _server() -> McpServer:
    return McpServer([ECHO], name="tether", version="0")


def _request(rid: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        validate_client_request(method, VERSION, params)  # our test inputs are valid too
        msg["params"] = params
    return msg


def _ok(reply: dict[str, Any] | None, method: str) -> dict[str, Any]:
    assert reply is not None
    jsonrpc_message_adapter.validate_python(reply)
    assert "result" in reply, reply
    validate_server_result(method, VERSION, reply["result"])
    result: dict[str, Any] = reply["result"]
    return result


INIT = {
    "protocolVersion": VERSION,
    "capabilities": {},
    "clientInfo": {"name": "test", "version": "1"},
}


def test_initialize_negotiates_and_validates() -> None:
    server = _server()
    result = _ok(server.handle(_request(1, "initialize", INIT)), "initialize")
    assert result["protocolVersion"] == VERSION
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert server.handle({"jsonrpc": "2.0", "method": "notifications/initialized"}) is None
    assert server.initialized


def test_unknown_protocol_version_gets_our_newest() -> None:
    reply = _server().handle(_request(1, "initialize", {**INIT, "protocolVersion": "1999-01-01"}))
    assert reply is not None
    assert reply["result"]["protocolVersion"] == SUPPORTED_VERSIONS[0]


def test_tools_list_of_the_real_tools_validates() -> None:
    server = McpServer(build_tools(), name="tether", version="0")
    result = _ok(server.handle(_request(2, "tools/list", {})), "tools/list")
    assert [t["name"] for t in result["tools"]] == [
        "sessions_list",
        "sessions_history",
        "sessions_send",
        "sessions_spawn",
        "session_status",
    ]


def test_call_success_error_and_denial_are_valid_results() -> None:
    server = _server()
    ok = _ok(
        server.handle(_request(3, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})),
        "tools/call",
    )
    assert ok["structuredContent"] == {"echo": "hi"}
    assert json.loads(ok["content"][0]["text"]) == {"echo": "hi"}
    for fail, words in (("tool", "the tool failed"), ("denied", "visibility is tree")):
        args = {"text": "x", "fail": fail}
        bad = _ok(
            server.handle(_request(4, "tools/call", {"name": "echo", "arguments": args})),
            "tools/call",
        )
        assert bad["isError"] is True
        assert words in bad["content"][0]["text"]


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (_request(5, "nope/nothing"), -32601),
        ({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "zz"}}, -32602),
        ({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo"}}, -32602),
        ({"jsonrpc": "2.0", "id": 8, "method": "ping", "params": [1]}, -32602),
        ({"jsonrpc": "1.0", "id": 9, "method": "ping"}, -32600),
        ([1, 2], -32600),
    ],
)
def test_protocol_errors(message: Any, code: int) -> None:
    reply = _server().handle(message)
    assert reply is not None
    jsonrpc_message_adapter.validate_python(reply)
    assert reply["error"]["code"] == code


def test_ping() -> None:
    assert _ok(_server().handle(_request(10, "ping")), "ping") == {}


def test_serve_over_streams() -> None:
    """The stdio loop: one reply per request line, none for notifications or blank lines."""
    lines = [
        json.dumps(_request(1, "initialize", INIT)),
        "",
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        "{not json",
        json.dumps(_request(2, "tools/call", {"name": "echo", "arguments": {"text": "a"}})),
    ]
    out = io.BytesIO()
    serve(_server(), io.BytesIO(("\n".join(lines) + "\n").encode()), out)
    replies = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [r.get("id") for r in replies] == [1, None, 2]
    assert replies[1]["error"]["code"] == -32700


def test_a_frame_nested_too_deeply_is_a_parse_error_and_the_bridge_goes_on() -> None:
    """A hostile agent's 100,000 nested brackets, or a lone surrogate escape: a parse
    error, never a RecursionError or an encoding crash that ends the bridge."""
    deep = "[" * 100_000 + "]" * 100_000
    lone = _request(2, "tools/call", {"name": "echo", "arguments": {"text": "a\ud800"}})
    call = _request(3, "tools/call", {"name": "echo", "arguments": {"text": "b"}})
    lines = [deep, json.dumps(lone), json.dumps(call)]
    out = io.BytesIO()
    serve(_server(), io.BytesIO(("\n".join(lines) + "\n").encode()), out)
    replies = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [r.get("id") for r in replies] == [None, None, 3]
    assert [r["error"]["code"] for r in replies[:2]] == [-32700, -32700]
    assert replies[2]["result"]["structuredContent"] == {"echo": "b"}


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(), st.lists, max_leaves=8))
def test_any_json_gets_a_valid_frame_or_nothing(message: Any) -> None:
    """Fuzz: whatever JSON arrives, the server answers a valid JSON-RPC frame or nothing."""
    reply = _server().handle(message)
    if reply is not None:
        jsonrpc_message_adapter.validate_python(reply)
