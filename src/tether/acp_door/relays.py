"""The agent's ``fs/*`` and ``terminal/*`` requests served by the ACP client itself.

A client that advertised ``fs.readTextFile``, ``fs.writeTextFile`` or ``terminal`` in
``initialize`` serves those methods for the turns it prompts: the door's prompt asks
the owner to relay them (the ``relay`` payload: :func:`tether.acp_door.translate.relay_methods`
and the door's token), and the owner sends each such request of the agent as a
``client_request`` frame on the turn's connection (:mod:`tether.owner.relays`). Here
it is put to the client as the ACP request it is, with the agent's session id
replaced by the door's, and the client's answer -- its result, or its JSON-RPC error
unchanged -- goes back to the owner as ``relay_answer`` on that same connection.

If the client never answers, the owner's timeout answers the agent; if the client
goes away, the door's tasks are cancelled and the turn's connection closes: the owner
answers the agent with an error at once. Either way the agent is never left waiting.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tether.acp_door import turns
from tether.client import _Connection
from tether.jsonrpc import Response

__all__ = ["relay_request"]

RequestClient = Callable[[str, dict[str, Any]], Awaitable[Response]]


async def relay_request(
    request_client: RequestClient, key: str, conn: _Connection, frame: dict[str, Any]
) -> None:
    """Put one relayed request to the client; send its answer back to the owner."""
    method, relay_id = frame.get("method"), frame.get("relayId")
    params = frame.get("params")
    if not isinstance(method, str) or not isinstance(relay_id, str):
        return
    params = {**(params if isinstance(params, dict) else {}), "sessionId": key}
    response = await request_client(method, params)
    if response.error is not None:
        answer: dict[str, Any] = {"error": response.error}
    else:
        result = response.result
        answer = {"result": result if isinstance(result, dict) else {}}
    await turns.answer_relay(conn, relay_id, answer)
