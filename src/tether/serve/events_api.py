"""A session's journal over HTTP: the live event stream (SSE), history, transcript, export.

``GET /v1/sessions/{id}/events``: ``text/event-stream``, one event per journal entry
with ``id:`` its ``seq`` and ``data:`` the entry's JSON (the ``sessions export`` line).
Where to start: ``Last-Event-ID`` (resume after that seq, as browsers do on reconnect),
else ``?from=SEQ`` (replay from SEQ), else ``?tail=N`` (the last N entries), else live
only. ``?control=1`` attaches the gateway to the owner as a controller while the stream
is open: the agent's questions wait for an answer (``POST …/questions/{qid}``) instead of
being decided at once by the non-interactive policy. Control events: ``lagged``
(``{"lastSeq": N}``: reconnect from there) and ``error``; on a fleet host, ``durable``
(``{"durableSeq": N}``, the highest seq shipped off-host) at the start and whenever it
advances -- with no ``id:``, so ``Last-Event-ID`` resume is not disturbed. How the
stream is served: :mod:`tether.serve.stream`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from tether import operations
from tether.serve import bodies, lookups, stream_clients
from tether.serve.app import Gateway, endpoint
from tether.serve.json_response import JSONResponse
from tether.serve.sessions_api import session_key

SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
HEARTBEAT_RANGE = (0.05, 300.0)


def _cursor(request: Request) -> tuple[int | None, int | None]:
    """(the first seq the client wants, None: live only or ``tail``; ``tail`` or None)."""
    params = request.query_params
    bodies.check_query(params, ("from", "tail", "heartbeat", "control"))
    header = request.headers.get("last-event-id")
    if header is not None and header.strip():
        if not header.strip().isdigit():
            raise bodies.bad_value("Last-Event-ID", "Last-Event-ID must be a journal seq")
        return int(header) + 1, None
    start = bodies.query_int(params, "from", minimum=1)
    tail = bodies.query_int(params, "tail", minimum=0)
    if start is not None and tail is not None:
        raise bodies.bad_value("from", "from and tail cannot be combined")
    return start, tail


def _heartbeat(request: Request, default: float) -> float:
    raw = request.query_params.get("heartbeat")
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise bodies.bad_value("heartbeat", "heartbeat is a number of seconds") from None
    low, high = HEARTBEAT_RANGE
    if not low <= value <= high:
        raise bodies.bad_value("heartbeat", f"heartbeat must be between {low} and {high} s")
    return value


@endpoint
async def events(request: Request) -> Response:
    """The session's journal as Server-Sent Events (replay, then live)."""
    gateway: Gateway = request.app.state.gateway
    key = session_key(request)
    cursor, tail = _cursor(request)
    heartbeat = _heartbeat(request, gateway.heartbeat)
    control = bodies.query_choice(request.query_params, "control", ("0", "1")) == "1"
    warm = None if control else gateway.hubs.warm(key)
    if warm is not None and tail is None:
        # A hub follows the session (so it is open): no lookup on the way to the stream.
        state, last = "open", warm.next_seq - 1
    else:
        state, last = await asyncio.to_thread(lookups.stream_info, key)
    if tail is not None:
        cursor = max(1, last - tail + 1)
    if state == "closed":
        # Nothing more will be written: replay what is asked, then end. Past the end:
        # 204, which tells a browser's EventSource not to reconnect.
        if cursor is None or cursor > last:
            return Response(status_code=204)
        body: AsyncIterator[bytes] = stream_clients.replay(key, cursor, last)
    else:
        assert gateway.stopping is not None  # set by the lifespan before any request
        hub = gateway.hubs.acquire(key, control=control)
        fleet_host = gateway.fleet_host
        body = stream_clients.follow(
            gateway.hubs,
            hub,
            cursor,
            heartbeat=heartbeat,
            stopping=gateway.stopping,
            durable_seq=None if fleet_host is None else lambda: fleet_host.durable_seq(key),
        )
    return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)


@endpoint
async def history(request: Request) -> Response:
    """One summary per turn, oldest first (``?limit=N``: the last N)."""
    key = session_key(request)
    bodies.check_query(request.query_params, ("limit",))
    limit = bodies.query_int(request.query_params, "limit", minimum=0)
    turns = await asyncio.to_thread(operations.history, key, limit=limit)
    return JSONResponse({"sessionKey": key, "turns": turns})


@endpoint
async def transcript(request: Request) -> Response:
    """The conversation as turns: prompt, assistant text, tool calls, stop reason."""
    key = session_key(request)
    bodies.check_query(request.query_params, ("tail",))
    tail = bodies.query_int(request.query_params, "tail", minimum=0)
    turns = await asyncio.to_thread(operations.transcript, key, tail=tail)
    return JSONResponse({"sessionKey": key, "turns": turns})


async def _ndjson(key: str, last: int) -> AsyncIterator[bytes]:
    cursor = 1
    while cursor <= last:
        read = stream_clients.read_rows
        rows: list[tuple[int, str]] = await asyncio.to_thread(read, key, cursor, 5000)
        rows = [r for r in rows if r[0] <= last]
        if not rows:
            return
        cursor = rows[-1][0] + 1
        yield "".join(line + "\n" for _, line in rows).encode()


@endpoint
async def export(request: Request) -> Response:
    """The whole stored journal as NDJSON (one entry per line), as ``sessions export``."""
    key = session_key(request)
    bodies.check_query(request.query_params, ())
    _state, last = await asyncio.to_thread(lookups.stream_info, key)
    headers: dict[str, Any] = {
        "Content-Disposition": f'attachment; filename="tether-{key[:12]}.ndjson"'
    }
    return StreamingResponse(_ndjson(key, last), media_type="application/x-ndjson", headers=headers)


def event_routes() -> list[BaseRoute]:
    return [
        Route("/v1/sessions/{id}/events", events, methods=["GET"]),
        Route("/v1/sessions/{id}/history", history, methods=["GET"]),
        Route("/v1/sessions/{id}/transcript", transcript, methods=["GET"]),
        Route("/v1/sessions/{id}/export", export, methods=["GET"]),
    ]
