"""Sessions and turns over HTTP: thin handlers over :mod:`tether.operations`.

Each handler checks its input (:mod:`tether.serve.bodies`), runs the blocking operation
in a thread and answers JSON; errors are raised and become problem documents.

A session's id in a URL is its session key (64 hex digits). Records also carry the
``host`` they live on, so that a router in front of several hosts can qualify ids later
(``multi-party.md`` §7); this gateway serves the sessions of its own ``TETHER_HOME``.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from tether import operations
from tether.errors import NoSession
from tether.serve import bodies, creating, lookups
from tether.serve.app import Gateway, endpoint
from tether.serve.json_response import JSONResponse

HOST = socket.gethostname()
CONTROL_BODY_MAX = 64 * 1024  # every body but a prompt's
SESSION_STATES = ("open", "closed", "all")


def session_key(request: Request) -> str:
    """The session key named in the URL.

    Raises:
        NoSession: not a session id (so 404, like an unknown one).
    """
    raw = str(request.path_params.get("id", ""))
    if len(raw) != 64 or raw.strip("0123456789abcdef"):
        raise NoSession("no such session (an id is a 64-hex session key)", session_id=raw[:80])
    return raw


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused past ``limit`` bytes without reading it all.

    Raises:
        UsageError: ``BODY_TOO_LARGE`` or ``UNSUPPORTED_MEDIA_TYPE`` (see bodies).
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise bodies.too_large(int(declared), limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise bodies.too_large(size, limit)
        chunks.append(chunk)
    body = b"".join(chunks)
    bodies.check_media_type(request.headers.get("content-type"), body)
    return body


async def parse_body(
    request: Request, spec: bodies.Spec, limit: int = CONTROL_BODY_MAX
) -> dict[str, Any]:
    return bodies.parse(await read_body(request, limit), spec)


def _gateway(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


def _record(item: dict[str, Any]) -> dict[str, Any]:
    return {"id": item["key"], "host": HOST, **item}


# --- sessions -------------------------------------------------------------------------


@endpoint
async def list_sessions(request: Request) -> Response:
    """Sessions of this home; filters ``agent``, ``cwd``, ``state`` (open|closed|all);
    ``live=1`` adds each open session's status snapshot."""
    params = request.query_params
    bodies.check_query(params, ("agent", "cwd", "state", "live"))
    state = bodies.query_choice(params, "state", SESSION_STATES) or "open"
    live = bodies.query_choice(params, "live", ("0", "1", "true", "false")) in ("1", "true")
    items = await asyncio.to_thread(operations.list_sessions, include_closed=state != "open")
    agent, cwd = params.get("agent"), params.get("cwd")
    items = [
        _record(i)
        for i in items
        if (agent is None or i["agent"] == agent)
        and (cwd is None or i["cwd"] == cwd)
        and (state != "closed" or i["state"] == "closed")
    ]
    if live:
        snapshots = await asyncio.gather(
            *(
                asyncio.to_thread(operations.status, i["key"])
                for i in items
                if i["state"] != "closed"
            )
        )
        by_key = {s.get("sessionKey"): s for s in snapshots}
        for item in items:
            item["status"] = by_key.get(item["key"])
    return JSONResponse({"sessions": items})


@endpoint
async def ensure_session(request: Request) -> Response:
    """Create the session (or reuse it) and make sure its owner serves."""
    body = await parse_body(request, bodies.ENSURE)
    fleet_key = creating.fleet_key(request, _gateway(request))
    restarted = creating.restarted_from(request) if fleet_key is not None else None
    result = await asyncio.to_thread(creating.ensure, body, HOST, fleet_key, restarted)
    return JSONResponse(result, status_code=201 if result["created"] else 200)


def _get(key: str) -> dict[str, Any]:
    from tether.state.registry import Registry

    with Registry() as registry:
        session = registry.session(key)
        if session is None:
            raise NoSession("no such session", session_key=key)
        record = _record(operations.describe(session, registry.instance_id))
        leases = registry.leases(session_key=key)
        lease = leases[-1] if leases else None
    record["status"] = operations.status(key)
    from tether.serve.procs import process_tree

    record["processes"] = process_tree(record["status"], lease)
    return record


@endpoint
async def get_session(request: Request) -> Response:
    """One session's record and its status snapshot (live owner, or the registry's view);
    on a fleet host, also which host it lives on (``hostId``) and how much of its journal
    is durable off-host (``durableSeq``)."""
    key = session_key(request)
    record = await asyncio.to_thread(_get, key)
    fleet_host = _gateway(request).fleet_host
    if fleet_host is not None:
        record["hostId"] = fleet_host.host_id
        record["durableSeq"] = fleet_host.durable_seq(key)
    return JSONResponse(record)


@endpoint
async def close_session(request: Request) -> Response:
    """End the session (idempotent: closing a closed session succeeds again)."""
    result = await asyncio.to_thread(operations.close_session, session_key(request))
    return JSONResponse(result)


# --- turns ----------------------------------------------------------------------------


def _submit(
    key: str, payload: dict[str, Any], deadline_ms: int | None, max_bytes: int
) -> dict[str, Any]:
    conn = operations.connect_or_start(key)
    # Every entry of this turn comes after what is stored now: a stream from here
    # misses nothing of it (and may show a few entries from just before).
    from_seq = lookups.last_seq(key) + 1
    with conn:
        rid, ack = operations.admit(conn, payload, deadline_ms=deadline_ms, max_bytes=max_bytes)
    return {
        "requestId": rid,
        "sessionKey": key,
        "queuePosition": ack.get("queuePosition"),
        "fromSeq": from_seq,
    }


@endpoint
async def submit_prompt(request: Request) -> Response:
    """Queue a prompt; ``202`` with its request id once the owner admitted it.

    The turn runs whether or not anyone watches; follow it on the events stream
    (``fromSeq`` in the answer is a cursor that includes the whole turn). With
    ``?wait=true``: ``200`` once the turn has ended, with its outcome
    (:mod:`tether.serve.prompt_wait`; a client leaving mid-wait does not cancel it).
    """
    key = session_key(request)
    from tether.ipc import protocol
    from tether.serve import prompt_wait

    wait = prompt_wait.asked(request)
    limit = protocol.prompt_max_bytes(_gateway(request).config)
    body = await parse_body(request, bodies.PROMPT, limit)
    blocks = bodies.prompt_blocks(body["prompt"])
    mode = bodies.permission_mode(body)
    timeout_ms = body.get("timeoutMs")
    if timeout_ms is not None and timeout_ms <= 0:
        raise bodies.bad_value("timeoutMs", "timeoutMs must be positive")
    gateway = _gateway(request)
    if wait:
        payload = operations.prompt_payload(blocks, client="http", wait=False, permission_mode=mode)
        turn = prompt_wait.wait_for_turn(gateway.prompter, key, payload, timeout_ms, limit, _submit)
        path, answer = await turn
        gateway.prompts_total[path] += 1
        return JSONResponse(answer)
    # The turn is followed on the journal, never on the owner connection: no updates on it.
    payload = operations.prompt_payload(
        blocks, client="http", wait=False, updates=False, permission_mode=mode
    )
    result = await gateway.prompter.prompt(key, payload, timeout_ms, limit)
    path = "loop"
    if result is None:  # no warm owner to talk to from the loop: the full path
        path = "thread"
        result = await asyncio.to_thread(_submit, key, payload, timeout_ms, limit)
    gateway.prompts_total[path] += 1
    result["events"] = f"/v1/sessions/{key}/events?from={result['fromSeq']}"
    return JSONResponse(result, status_code=202)


def require_session(key: str) -> None:
    """Raises NoSession unless the registry knows the session (open or closed)."""
    from tether.state.registry import Registry

    with Registry() as registry:
        if registry.session(key) is None:
            raise NoSession("no such session", session_key=key)


def _cancel(key: str, target: str | None, wait: bool = False) -> dict[str, Any]:
    result = operations.cancel(key, target, wait=wait)
    if result.get("reason") == "no running owner":
        require_session(key)  # an unknown session is a 404, not "nothing to cancel"
    return result


@endpoint
async def cancel(request: Request) -> Response:
    """Cancel the running turn (the session stays), or remove queued ``requestId``;
    ``wait``: answer once the turn has ended, saying whether the agent honoured it."""
    key = session_key(request)
    body = await parse_body(request, bodies.CANCEL)
    target, wait = body.get("requestId"), bool(body.get("wait"))
    return JSONResponse(await asyncio.to_thread(_cancel, key, target, wait))


@endpoint
async def set_mode(request: Request) -> Response:
    """session/set_mode through the owner (replayed on the agent's next start)."""
    key = session_key(request)
    body = await parse_body(request, bodies.MODE)
    if not body["modeId"]:
        raise bodies.bad_value("modeId", "modeId must not be empty")
    return JSONResponse(await asyncio.to_thread(operations.set_mode, key, body["modeId"]))


@endpoint
async def set_config(request: Request) -> Response:
    """session/set_config_option through the owner."""
    key = session_key(request)
    body = await parse_body(request, bodies.CONFIG)
    if not body["configId"]:
        raise bodies.bad_value("configId", "configId must not be empty")
    result = await asyncio.to_thread(
        operations.set_config_option, key, body["configId"], body["value"]
    )
    return JSONResponse(result)


@endpoint
async def terminate_session(request: Request) -> Response:
    """The operator's immediate end (TERM, grace, KILL through the keeper); idempotent."""
    key = session_key(request)
    await parse_body(request, {})
    client = request.client
    by = {"door": "http", "peer": f"{client.host}:{client.port}" if client else "unix"}
    return JSONResponse(await asyncio.to_thread(operations.terminate, key, by=by))


def session_routes() -> list[BaseRoute]:
    return [
        Route("/v1/sessions", list_sessions, methods=["GET"]),
        Route("/v1/sessions", ensure_session, methods=["POST"]),
        Route("/v1/sessions/{id}", get_session, methods=["GET"]),
        Route("/v1/sessions/{id}", close_session, methods=["DELETE"]),
        Route("/v1/sessions/{id}/prompt", submit_prompt, methods=["POST"]),
        Route("/v1/sessions/{id}/cancel", cancel, methods=["POST"]),
        Route("/v1/sessions/{id}/mode", set_mode, methods=["POST"]),
        Route("/v1/sessions/{id}/config", set_config, methods=["POST"]),
        Route("/v1/sessions/{id}/terminate", terminate_session, methods=["POST"]),
    ]
