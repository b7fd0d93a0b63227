"""ACP over HTTP: ``/v1/acp/{serverId}`` (issue 12), in sandbox-agent 0.4.2's route shape.

``POST`` one JSON-RPC message: a request is answered in the response (200, JSON; no
flat timeout: a prompt answers when its turn ends); a notification or a client's
answer gets 202. The first POST to a server id creates the server for ``?agent=NAME``
(default: the configured agent). ``GET``: Server-Sent Events of everything else the
server says (``session/update``, ``_tether/session/ended``, the agent's questions as
``session/request_permission``, relayed ``fs/*`` / ``terminal/*``), ``id:`` the journal
cursor after the event -- with one session, its journal ``seq``
(:mod:`tether.acp_door.event_ids`); ``Last-Event-ID`` resumes from the server's ring of
recent events, or from the journal when the ring no longer holds the id (no gap, no
duplicate; only live-only events, the server's requests to the client, cannot come
back from the journal); a comment line every ``heartbeat`` seconds. A stream may open
before the server exists: sandbox-agent's client opens its stream together with its
first POST, and the two race; the stream then waits for the server (heartbeats
meanwhile) and starts from its first event, rather than answering 204, which ends that
client's stream until its next POST. A stream of a closed server is 204 (nothing will
come: an EventSource stops). ``DELETE``: close the server (idempotent, 204): its running
turns are cancelled, its sessions stay warm.
The core, with no HTTP in it, is
:class:`tether.acp_door.channel.AcpChannel`, handed over by the program
(:mod:`tether.serve.acp_binding`): the gateway imports no other door.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from tether import _fastjson
from tether.errors import UsageError
from tether.serve.acp_binding import AcpBinding, AcpServer
from tether.serve.app import Gateway, endpoint
from tether.serve.json_response import JSONResponse

__all__ = ["acp_routes"]

SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
CLOSED_KEPT = 4096  # closed server ids remembered (their streams: 204, not a wait)
# How long a stream opened before its server waits for the first POST to create it
# (a client's GET races its first POST); an id nobody creates ends its stream after it.
BIRTH_WAIT_S = 60.0


class _Servers:
    """One gateway's ACP servers: the open ones, the recently closed ids, and the
    streams waiting for a server to be created."""

    def __init__(self) -> None:
        self.open: dict[str, AcpServer] = {}
        self._closed: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._born: dict[str, asyncio.Event] = {}
        self._waiting: dict[str, int] = {}  # streams waiting on each _born event

    def create(self, server_id: str, channel: AcpServer) -> AcpServer:
        self.open[server_id] = channel
        self._closed.pop(server_id, None)
        self._tell(server_id)
        return channel

    def close(self, server_id: str) -> AcpServer | None:
        channel = self.open.pop(server_id, None)
        self._closed[server_id] = None
        while len(self._closed) > CLOSED_KEPT:
            self._closed.popitem(last=False)
        self._tell(server_id)
        return channel

    def was_closed(self, server_id: str) -> bool:
        return server_id in self._closed

    def _tell(self, server_id: str) -> None:
        born = self._born.pop(server_id, None)
        if born is not None:
            born.set()

    def wait_for_birth(self, server_id: str) -> asyncio.Event:
        """Set when the server is created (or closed): what a waiting stream waits on.
        Each call is paired with :meth:`stop_waiting`."""
        self._waiting[server_id] = self._waiting.get(server_id, 0) + 1
        return self._born.setdefault(server_id, asyncio.Event())

    def stop_waiting(self, server_id: str) -> None:
        """A waiting stream left: the last one takes the event along (an id no client
        ever creates must not stay here)."""
        left = self._waiting.pop(server_id, 1) - 1
        if left > 0:
            self._waiting[server_id] = left
        else:
            self._born.pop(server_id, None)


_SERVERS: dict[int, _Servers] = {}  # per gateway (by id)


def _servers(gateway: Gateway) -> _Servers:
    return _SERVERS.setdefault(id(gateway), _Servers())


def _acp(gateway: Gateway) -> AcpBinding:
    assert gateway.acp is not None  # the routes are mounted only with one (app.routes)
    return gateway.acp


@endpoint
async def post_message(request: Request) -> Response:
    """One JSON-RPC message in: a request's answer, or 202."""
    gateway: Gateway = request.app.state.gateway
    server_id = request.path_params["serverId"]
    try:
        message = _fastjson.loads_unicode(await request.body())
    except ValueError as exc:
        raise UsageError(
            f"the body is not JSON text ({exc}): one JSON-RPC message is expected"
        ) from None
    if not isinstance(message, dict):
        raise UsageError("the body must be one JSON-RPC message (an object)")
    servers = _servers(gateway)
    channel = servers.open.get(server_id)
    if channel is None or channel.closed:
        opened = _acp(gateway).open_server(gateway.config, request.query_params.get("agent"))
        channel = servers.create(server_id, opened)
    answer = await channel.post(message)
    if answer is None:
        return Response(status_code=202)
    return JSONResponse(answer)


async def _sse(
    servers: _Servers, server_id: str, after: str | None, heartbeat: float
) -> AsyncIterator[bytes]:
    channel = servers.open.get(server_id)
    from_start = False
    if channel is None:  # not created yet: wait for it (see the module docstring)
        born = servers.wait_for_birth(server_id)
        deadline = asyncio.get_running_loop().time() + BIRTH_WAIT_S
        try:
            while channel is None:
                if asyncio.get_running_loop().time() >= deadline:
                    return  # never created: the stream ends; a client may open it again
                try:
                    async with asyncio.timeout(heartbeat):
                        await born.wait()
                except TimeoutError:
                    yield b": heartbeat\n\n"
                if servers.was_closed(server_id):
                    return
                channel, from_start = servers.open.get(server_id), after is None
        finally:
            servers.stop_waiting(server_id)
    async for item in channel.events(after, idle=heartbeat, from_start=from_start):
        if item is None:
            yield b": heartbeat\n\n"
            continue
        event_id, frame = item
        yield f"id: {event_id}\ndata: ".encode() + _fastjson.utf8(frame) + b"\n\n"


@endpoint
async def events(request: Request) -> Response:
    """Everything the server says that is not an answer, as Server-Sent Events."""
    gateway: Gateway = request.app.state.gateway
    servers, server_id = _servers(gateway), request.path_params["serverId"]
    channel = servers.open.get(server_id)
    if (channel is None and servers.was_closed(server_id)) or (
        channel is not None and channel.closed
    ):
        return Response(status_code=204)  # nothing will come: an EventSource stops
    header = request.headers.get("last-event-id", "").strip()
    after = header or None
    if after is not None:
        _acp(gateway).check_event_id(after)  # a bad one is a 400 now, not a broken stream
    body = _sse(servers, server_id, after, gateway.heartbeat)
    return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)


@endpoint
async def close_server(request: Request) -> Response:
    """Close the server (idempotent)."""
    gateway: Gateway = request.app.state.gateway
    channel = _servers(gateway).close(request.path_params["serverId"])
    if channel is not None:
        await channel.aclose()
    return Response(status_code=204)


def acp_routes() -> list[BaseRoute]:
    return [
        Route("/v1/acp/{serverId}", post_message, methods=["POST"]),
        Route("/v1/acp/{serverId}", events, methods=["GET"]),
        Route("/v1/acp/{serverId}", close_server, methods=["DELETE"]),
    ]
