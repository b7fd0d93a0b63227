"""The door on an in-memory link: the JSON-RPC handling that needs no session at all."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.acp_schema import schema_errors

from tether.acp_door import AcpDoor, DoorOptions


def _serve(lines: list[bytes]) -> list[dict[str, Any]]:
    """Feed ``lines`` to a door, then EOF; return every frame it wrote, in order."""
    out: list[bytes] = []
    chunks = [*lines, b""]

    async def read() -> bytes:
        await asyncio.sleep(0)
        return chunks.pop(0)

    door = AcpDoor(out.append, DoorOptions("mock", ["mock-agent"], "mock-scope"))
    asyncio.run(door.serve(read))
    return [json.loads(line) for chunk in out for line in chunk.splitlines()]


def test_initialize_unknown_methods_and_garbage() -> None:
    """initialize is answered (protocol 1); an unknown method -32601; a malformed line a
    parse error with id null; a notification nothing; the door ends at EOF."""
    frames = _serve(
        [
            b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n',
            b'{"jsonrpc":"2.0","id":2,"method":"_vendor/x","params":{}}\n{oops\n',
            b'{"jsonrpc":"2.0","method":"_vendor/note","params":{}}\n',
            b'{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s",'
            b'"prompt":[{"type":"text","text":"x"}]}}\n',
        ]
    )
    by_id = {f.get("id"): f for f in frames}
    assert by_id[1]["result"]["protocolVersion"] == 1
    assert schema_errors(by_id[1], "agent", "initialize") == []
    assert by_id[2]["error"]["code"] == -32601
    assert by_id[None]["error"]["code"] == -32700
    assert by_id[3]["error"]["code"] == -32002  # no session opened on this connection
    assert len(frames) == 4


def test_session_requests_need_a_session_id() -> None:
    """A session method without its sessionId is invalid params, answered at once."""
    frames = _serve(
        [b'{"jsonrpc":"2.0","id":7,"method":"session/set_mode","params":{"modeId":"x"}}\n']
    )
    assert frames[0]["id"] == 7
    assert frames[0]["error"]["code"] == -32602
