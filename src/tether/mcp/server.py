"""A small MCP server: JSON-RPC 2.0 over newline-delimited stdio, tools only.

Theory of operation
-------------------
Why not the official SDK: ``import mcp.server`` (mcp 2.3.0) takes 0.54-1.0 s of import
time and ~65 MB of memory (measured with ``python -X importtime`` on this project's
2-core machine), and every agent Tether starts with the bridge enabled would start one
such server. This one imports the standard library only and answers ``initialize`` in
milliseconds. The SDK is still the oracle: the tests validate every frame this server
sends against its types (``mcp_types.methods.validate_server_result``).

What it speaks (MCP revisions 2024-11-05 through 2025-11-25, which share these
shapes): ``initialize`` (we answer the client's protocol version when we know it, else
our newest), ``notifications/initialized``, ``ping``, ``tools/list`` and ``tools/call``.
Tool failures are results with ``isError: true`` (the model sees them and can react, as
the specification asks); protocol failures are JSON-RPC errors: ``-32700`` unparsable,
``-32600`` not a request, ``-32601`` unknown method, ``-32602`` bad params (including an
unknown tool name). Notifications are never answered; requests before ``initialize``
are served anyway (clients differ in how strictly they order the handshake).

:class:`McpServer` has no I/O: ``handle(message) -> reply | None``. :func:`serve`
is the loop over two binary streams.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any, Final

from tether import _fastjson
from tether.errors import TetherError

__all__ = ["SUPPORTED_VERSIONS", "McpServer", "Tool", "ToolError", "serve"]

SUPPORTED_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
MAX_LINE: Final = 16 * 1024 * 1024  # a frame longer than this is refused, not buffered

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602


class ToolError(Exception):
    """A tool's own failure: reported to the model as ``isError: true``."""


@dataclass(frozen=True)
class Tool:
    """One tool: its name, description, JSON Schema of its arguments, and the function.

    ``fn`` takes the arguments and returns a JSON object: it is sent as
    ``structuredContent`` and, serialised, as the text content.
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    fn: Callable[[dict[str, Any]], dict[str, Any]]

    def listing(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": dict(self.input_schema),
        }


def _error(rid: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


def _result(rid: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def _missing_required(schema: Mapping[str, Any], args: Mapping[str, Any]) -> list[str]:
    return [name for name in schema.get("required", ()) if name not in args]


class McpServer:
    """The protocol state of one MCP connection (sans-IO)."""

    def __init__(self, tools: list[Tool], *, name: str, version: str) -> None:
        self.tools = {t.name: t for t in tools}
        self.server_info = {"name": name, "version": version}
        self.protocol_version: str | None = None
        self.initialized = False

    def handle(self, message: Any) -> dict[str, Any] | None:
        """The reply to one decoded JSON-RPC message (None for notifications)."""
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return _error(None, INVALID_REQUEST, "not a JSON-RPC 2.0 message")
        method = message.get("method")
        if "id" not in message:  # a notification (or a stray response): never answered
            if method == "notifications/initialized":
                self.initialized = True
            return None
        rid = message["id"]
        if not isinstance(method, str):
            return _error(rid, INVALID_REQUEST, "a request needs a method")
        params = message.get("params") or {}
        if not isinstance(params, dict):
            return _error(rid, INVALID_PARAMS, "params must be an object")
        if method == "initialize":
            return _result(rid, self._initialize(params))
        if method == "ping":
            return _result(rid, {})
        if method == "tools/list":
            return _result(rid, {"tools": [t.listing() for t in self.tools.values()]})
        if method == "tools/call":
            return self._call(rid, params)
        return _error(rid, METHOD_NOT_FOUND, f"method not found: {method}")

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        self.protocol_version = asked if asked in SUPPORTED_VERSIONS else SUPPORTED_VERSIONS[0]
        return {
            "protocolVersion": self.protocol_version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": dict(self.server_info),
            "instructions": (
                "Tether sessions: list, read, prompt and start other agent sessions. What"
                " you may reach is decided by Tether's visibility rules."
            ),
        }

    def _call(self, rid: Any, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        tool = self.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            return _error(rid, INVALID_PARAMS, f"unknown tool: {name!r}")
        args = params.get("arguments") or {}
        if not isinstance(args, dict):
            return _error(rid, INVALID_PARAMS, "arguments must be an object")
        missing = _missing_required(tool.input_schema, args)
        if missing:
            return _error(rid, INVALID_PARAMS, f"{tool.name}: missing {', '.join(missing)}")
        try:
            value = tool.fn(args)
        except (ToolError, TetherError) as exc:
            return _result(rid, {"content": [{"type": "text", "text": str(exc)}], "isError": True})
        text = json.dumps(value, ensure_ascii=False)
        return _result(
            rid,
            {"content": [{"type": "text", "text": text}], "structuredContent": value},
        )


def serve(server: McpServer, stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """Answer newline-delimited JSON-RPC from ``stdin`` on ``stdout`` until EOF."""
    while True:
        line = stdin.readline(MAX_LINE + 1)
        if not line:
            return
        if len(line) > MAX_LINE:
            reply: dict[str, Any] | None = _error(None, INVALID_REQUEST, "frame too long")
            while line and not line.endswith(b"\n"):  # skip the rest of the frame
                line = stdin.readline(MAX_LINE)
        elif not line.strip():
            continue
        else:
            try:
                # Too deep, or a lone surrogate (no text: it could be neither stored nor
                # sent on) is a parse error too, never a crash of the bridge.
                message = _fastjson.loads_unicode(line)
            except ValueError:
                reply = _error(None, PARSE_ERROR, "parse error")
            else:
                reply = server.handle(message)
        if reply is not None:
            stdout.write(_fastjson.utf8(reply) + b"\n")
            stdout.flush()
