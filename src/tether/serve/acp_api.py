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
back from the journal); a comment line every ``heartbeat`` seconds. ``DELETE``: close
the server (idempotent, 204): its running turns are cancelled, its sessions stay warm.
The core, with no HTTP in it, is
:class:`tether.acp_door.channel.AcpChannel`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from tether.acp_door.channel import AcpChannel, check_event_id
from tether.errors import UsageError
from tether.serve.app import Gateway, endpoint

__all__ = ["acp_routes"]

SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
_CHANNELS: dict[int, dict[str, AcpChannel]] = {}  # per gateway (by id): server id -> channel


def _channels(gateway: Gateway) -> dict[str, AcpChannel]:
    return _CHANNELS.setdefault(id(gateway), {})


def _options(gateway: Gateway, agent: str | None) -> Any:
    from tether import agents, sessions
    from tether.acp_door import DoorOptions

    cfg = gateway.config
    label = agent or str(cfg.get("defaultAgent") or agents.DEFAULT_AGENT)
    argv = agents.resolve(label, cfg.get("agents"))
    named = agents.is_agent_name(label, cfg.get("agents"))
    return DoorOptions(
        agent_label=label,
        agent_argv=argv,
        agent_scope=sessions.agent_scope(label, argv, named=named),
        owner_options={"permission_mode": str(cfg.get("defaultPermissions") or "approve-reads")},
    )


@endpoint
async def post_message(request: Request) -> Response:
    """One JSON-RPC message in: a request's answer, or 202."""
    gateway: Gateway = request.app.state.gateway
    server_id = request.path_params["serverId"]
    try:
        message = json.loads(await request.body())
    except ValueError:
        raise UsageError("the body is not JSON: one JSON-RPC message is expected") from None
    if not isinstance(message, dict):
        raise UsageError("the body must be one JSON-RPC message (an object)")
    channels = _channels(gateway)
    channel = channels.get(server_id)
    if channel is None or channel.closed:
        channel = AcpChannel(_options(gateway, request.query_params.get("agent")))
        channels[server_id] = channel
    answer = await channel.post(message)
    if answer is None:
        return Response(status_code=202)
    return JSONResponse(answer)


async def _sse(channel: AcpChannel, after: str | None, heartbeat: float) -> AsyncIterator[bytes]:
    async for item in channel.events(after, idle=heartbeat):
        if item is None:
            yield b": heartbeat\n\n"
            continue
        event_id, frame = item
        data = json.dumps(frame, separators=(",", ":"), ensure_ascii=False)
        yield f"id: {event_id}\ndata: {data}\n\n".encode()


@endpoint
async def events(request: Request) -> Response:
    """Everything the server says that is not an answer, as Server-Sent Events."""
    gateway: Gateway = request.app.state.gateway
    channel = _channels(gateway).get(request.path_params["serverId"])
    if channel is None or channel.closed:
        return Response(status_code=204)  # nothing will come: an EventSource stops
    header = request.headers.get("last-event-id", "").strip()
    after = header or None
    if after is not None:
        check_event_id(after)  # a bad one is a 400 now, not a broken stream
    body = _sse(channel, after, gateway.heartbeat)
    return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)


@endpoint
async def close_server(request: Request) -> Response:
    """Close the server (idempotent)."""
    gateway: Gateway = request.app.state.gateway
    channel = _channels(gateway).pop(request.path_params["serverId"], None)
    if channel is not None:
        await channel.aclose()
    return Response(status_code=204)


def acp_routes() -> list[BaseRoute]:
    return [
        Route("/v1/acp/{serverId}", post_message, methods=["POST"]),
        Route("/v1/acp/{serverId}", events, methods=["GET"]),
        Route("/v1/acp/{serverId}", close_server, methods=["DELETE"]),
    ]
