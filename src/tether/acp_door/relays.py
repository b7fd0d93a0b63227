"""The door's own requests to its ACP client, and the agent's requests relayed to it.

The door asks its client things: a permission question or an elicitation put to it as
a controller (:mod:`.questions`), and the agent's ``fs/*`` and ``terminal/*`` requests
when the client serves them. :class:`ClientRequests` sends each as a JSON-RPC request
and waits for the client's response; a wait that is abandoned (the owner gave up, the
turn ended, the door is closing) removes the request from the JSON-RPC core, so the
client's late answer is dropped there -- counted (:attr:`ClientRequests.late_answers`),
never delivered -- and the client is told with ``$/cancel_request``.

Relays: a client that advertised ``fs.readTextFile``, ``fs.writeTextFile`` or
``terminal`` in ``initialize`` serves those methods for the turns it prompts: the
door's prompt asks the owner to relay them (:meth:`ClientRequests.relay_spec`: the
methods, and a token naming this door over all its turns), and the owner sends each
such request of the agent as a ``client_request`` frame on the turn's connection
(:mod:`tether.owner.relays`). It is put to the client as the ACP request it is, with
the agent's session id replaced by the door's, and the client's answer -- its result,
or its JSON-RPC error unchanged -- goes back to the owner as ``relay_answer`` on that
same connection.

The door's wait is bounded by the owner's: when the owner stops waiting (its timeout,
the agent's ``$/cancel_request``) it says ``relay_expired`` and the door abandons that
request; when the turn ends, every relay of its connection is abandoned. If the client
goes away, the door's tasks are cancelled and the turn's connection closes: the owner
answers the agent with an error at once. Either way the agent is never left waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Coroutine
from typing import Any

from tether.acp_door import translate, turns
from tether.errors import RemoteProtocolError
from tether.ipc.aio_client import AsyncOwnerConnection
from tether.jsonrpc import INVALID_PARAMS, JsonRpcConnection, Response

__all__ = ["ClientRequests"]

Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None] | None"]


class ClientRequests:
    """Requests from the door to its client. See the module docstring.

    Args:
        rpc: the door's JSON-RPC core (ids, pending table, late answers).
        send: writes bytes to the client.
        spawn: runs a coroutine in the door's task group (None: the door is closing).
    """

    def __init__(self, rpc: JsonRpcConnection, send: Callable[[bytes], None], spawn: Spawn) -> None:
        self._rpc = rpc
        self._send = send
        self._spawn = spawn
        self._asked: dict[int, asyncio.Future[Response]] = {}
        # (turn connection, relayId) -> the task putting that relay to the client
        self._relays: dict[tuple[int, str], asyncio.Task[None]] = {}
        # Names this door to the owners over all the turns it prompts (each on its own
        # connection), so a terminal its client created is found in a later turn.
        self.token = os.urandom(8).hex()

    @property
    def late_answers(self) -> int:
        """Client answers that came after the door stopped waiting (dropped)."""
        return self._rpc.stats.stale_responses

    def answered(self, response: Response) -> None:
        """The client's response to one of our requests (the core dropped late ones)."""
        waiter = self._asked.pop(response.id, None) if isinstance(response.id, int) else None
        if waiter is not None and not waiter.done():
            waiter.set_result(response)

    async def request(self, method: str, params: dict[str, Any]) -> Response:
        """Send the client a request; its response (a result or a JSON-RPC error).

        Cancellation: the request is abandoned (its late answer dropped and counted)
        and the client told with ``$/cancel_request``.
        """
        rid, data = self._rpc.send_request(method, params, now=time.monotonic())
        answer: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._asked[rid] = answer
        self._send(data)
        try:
            return await answer
        finally:
            if self._asked.pop(rid, None) is not None:
                self._rpc.abandon(rid, reason="no longer waited for")
                with contextlib.suppress(OSError):  # a client gone for good needs no word
                    self._send(self._rpc.send_notification("$/cancel_request", {"requestId": rid}))

    async def ask(self, method: str, params: dict[str, Any]) -> Any:
        """Send the client a request; its result (a JSON-RPC error raises)."""
        response = await self.request(method, params)
        if response.error is not None:
            raise RemoteProtocolError(f"the client refused {method}: {response.error}")
        return response.result

    # --- relays -----------------------------------------------------------------------

    def relay_spec(
        self, capabilities: dict[str, Any]
    ) -> tuple[dict[str, Any], turns.Relayer] | None:
        """The prompt's ``relay`` payload and its handler (this), or None: the client
        serves none of the relayable methods."""
        methods = translate.relay_methods(capabilities)
        return ({"methods": methods, "client": self.token}, self) if methods else None

    def on_owner_frame(self, key: str, conn: AsyncOwnerConnection, frame: dict[str, Any]) -> None:
        """A ``client_request`` (put it to the client) or ``relay_expired`` (stop) of a
        turn of session ``key`` on ``conn``."""
        relay_id = frame.get("relayId")
        if not isinstance(relay_id, str):
            return
        slot = (id(conn), relay_id)
        if frame.get("type") == "relay_expired":
            task = self._relays.pop(slot, None)
            if task is not None:
                task.cancel()
            return
        task = self._spawn(self._relay(key, conn, relay_id, frame))
        if task is not None:
            self._relays[slot] = task
            task.add_done_callback(lambda _: self._relays.pop(slot, None))

    def turn_ended(self, conn: AsyncOwnerConnection) -> None:
        """The turn on ``conn`` ended: nobody can take its relays' answers any more."""
        for (where, _), task in list(self._relays.items()):
            if where == id(conn):
                task.cancel()

    async def _relay(
        self, key: str, conn: AsyncOwnerConnection, relay_id: str, frame: dict[str, Any]
    ) -> None:
        """Put one relayed request to the client; send its answer back to the owner."""
        method, params = frame.get("method"), frame.get("params")
        if not isinstance(method, str):  # answered at once: the agent must not wait it out
            error = {"code": INVALID_PARAMS, "message": "the relayed request names no method"}
            await turns.answer_relay(conn, relay_id, {"error": error})
            return
        params = {**(params if isinstance(params, dict) else {}), "sessionId": key}
        response = await self.request(method, params)
        if response.error is not None:
            answer: dict[str, Any] = {"error": response.error}
        else:
            result = response.result
            answer = {"result": result if isinstance(result, dict) else {}}
        await turns.answer_relay(conn, relay_id, answer)
