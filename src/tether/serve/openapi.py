"""The gateway's OpenAPI 3.1 document, built from the same body specs the routes check."""

from __future__ import annotations

from typing import Any

from tether._version import __version__
from tether.serve import bodies

_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
_PROBLEM = {"$ref": "#/components/responses/Problem"}
_ERRORS = {"401": {"description": "no or wrong bearer token"}, "4XX": _PROBLEM, "5XX": _PROBLEM}


def _query(name: str, kind: str, doc: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": {"type": kind},
        "description": doc,
    }


def _body(spec: bodies.Spec) -> dict[str, Any]:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {name: field.schema() for name, field in spec.items()},
        "required": [name for name, field in spec.items() if field.required],
    }
    return {"required": True, "content": {"application/json": {"schema": schema}}}


_SERVER = {"name": "serverId", "in": "path", "required": True, "schema": {"type": "string"}}
_AGENT = {"name": "agent", "in": "query", "required": False, "schema": {"type": "string"}}


def _op(
    summary: str,
    ok: str = "200",
    *,
    params: list[dict[str, Any]] | None = None,
    body: bodies.Spec | None = None,
    media: str = "application/json",
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "parameters": params or [],
        "responses": {ok: {"description": "success", "content": {media: {}}}, **_ERRORS},
    }
    if body is not None:
        op["requestBody"] = _body(body)
    return op


SESSION_SSE_EVENTS = (
    "One event per journal entry: `id:` its seq, `data:` the entry. Events with no"
    " `id:` (so `Last-Event-ID` resume never sees them): `lagged` `{lastSeq}` (the"
    " client fell behind the ring: reconnect from there), `error` `{detail, lastSeq}`;"
    " on a fleet host, `durable` `{durableSeq}` at the start and whenever the highest"
    " seq shipped off-host advances; through a fleet router, `host_lost`"
    " `{lastSeq, durableSeq, hostId}` when the session's host went away (the last event)."
)


def _prompt_op() -> dict[str, Any]:
    """``POST …/prompt``: 202 once admitted, or with ``?wait=true`` 200 at the turn's end."""
    op = _op(
        "queue a prompt; 202 with requestId once admitted (?wait=true: 200 once the turn"
        " has ended, with its outcome; a client leaving mid-wait does not cancel the turn)",
        "202",
        params=[
            _ID,
            _query("wait", "string", "true|1: hold the request until the turn ends"),
        ],
        body=bodies.PROMPT,
    )
    op["responses"]["200"] = {
        "description": "?wait=true: the turn ended",
        "content": {"application/json": {"schema": _TURN_ENDED}},
    }
    return op


_TURN_ENDED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "requestId": {"type": "string"},
        "sessionKey": {"type": "string"},
        "stopReason": {"type": "string"},
        "text": {"type": "string", "description": "the agent's message chunks, joined"},
        "textTruncated": {"type": "boolean"},
        "updates": {
            "type": "object",
            "additionalProperties": {"type": "integer"},
            "description": "session/update notifications of the turn, by sessionUpdate kind",
        },
        "fromSeq": {"type": "integer", "description": "a cursor before the turn's entries"},
        "lastSeq": {
            "type": ["integer", "null"],
            "description": "the seq of the turn's last agent frame (turn_ended follows)",
        },
        "events": {"type": "string"},
        "permissionDenied": {"type": "integer"},
        "cancel": {"type": "object"},
    },
    "required": ["requestId", "sessionKey", "stopReason", "text", "updates", "fromSeq"],
}


def document() -> dict[str, Any]:
    """The document."""
    session = [_ID]
    paths: dict[str, Any] = {
        "/v1/sessions": {
            "get": _op(
                "list sessions",
                params=[
                    _query("agent", "string", "only this agent"),
                    _query("cwd", "string", "only this working directory"),
                    _query("state", "string", "open (default) | closed | all"),
                    _query("live", "string", "1: add each open session's status snapshot"),
                ],
            ),
            "post": _op(
                "create or reuse a session; start its owner (201 created, 200 reused)",
                body=bodies.ENSURE,
            ),
        },
        "/v1/sessions/{id}": {
            "get": _op("the session's record, status snapshot and process tree", params=session),
            "delete": _op("close the session (idempotent)", params=session),
        },
        "/v1/sessions/{id}/prompt": {
            "post": _prompt_op(),
        },
        "/v1/sessions/{id}/cancel": {
            "post": _op(
                "cancel the running turn, or remove a queued request",
                params=session,
                body=bodies.CANCEL,
            ),
        },
        "/v1/sessions/{id}/mode": {
            "post": _op("session/set_mode", params=session, body=bodies.MODE),
        },
        "/v1/sessions/{id}/config": {
            "post": _op("session/set_config_option", params=session, body=bodies.CONFIG),
        },
        "/v1/sessions/{id}/events": {
            "get": _op(
                "the journal as Server-Sent Events: id = seq; resume with Last-Event-ID",
                params=[
                    _ID,
                    _query("from", "integer", "replay from this seq, then live"),
                    _query("tail", "integer", "start this many entries before the end"),
                    _query("heartbeat", "number", "seconds between heartbeats (default 15)"),
                    _query("control", "string", "1: questions wait for an HTTP answer"),
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string"},
                    },
                ],
                media="text/event-stream",
            )
            | {"description": SESSION_SSE_EVENTS},
        },
        "/v1/sessions/{id}/history": {
            "get": _op("one summary per turn", params=[_ID, _query("limit", "integer", "last N")]),
        },
        "/v1/sessions/{id}/transcript": {
            "get": _op("the conversation", params=[_ID, _query("tail", "integer", "last N turns")]),
        },
        "/v1/sessions/{id}/export": {
            "get": _op(
                "the stored journal as NDJSON", params=session, media="application/x-ndjson"
            ),
        },
        "/v1/sessions/{id}/processes": {
            "get": _op("the session's process tree (read from /proc)", params=session),
        },
        "/v1/sessions/{id}/questions": {
            "get": _op("the agent's open questions (pending interactions)", params=session),
        },
        "/v1/sessions/{id}/questions/{qid}": {
            "post": _op(
                "answer a question: the first valid answer wins (409 after it)",
                params=[
                    _ID,
                    {"name": "qid", "in": "path", "required": True, "schema": {"type": "string"}},
                ],
                body=bodies.ANSWER,
            ),
        },
        "/v1/acp/{serverId}": {
            "post": _op(
                "one JSON-RPC message to this ACP server (created for ?agent= on first use):"
                " a request's answer, or 202",
                params=[_SERVER, _AGENT],
            ),
            "get": _op(
                "what the server says that is not an answer, as Server-Sent Events"
                " (Last-Event-ID resumes)",
                params=[_SERVER],
                media="text/event-stream",
            ),
            "delete": _op("close this ACP server (idempotent)", "204", params=[_SERVER]),
        },
        "/v1/agents": {"get": _op("agents a session may be created with")},
        "/v1/health": {"get": _op("the gateway is up")},
        "/v1/openapi.json": {"get": _op("this document")},
        "/metrics": {"get": _op("counters, Prometheus text format", media="text/plain")},
    }
    paths["/v1/sessions/{id}/terminate"] = {
        "post": _op("the operator's immediate end of the session (idempotent)", params=session)
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "Tether gateway", "version": __version__},
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {
                "Problem": {
                    "description": "an RFC 9457 problem document with Tether's error codes",
                    "content": {
                        "application/problem+json": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "type": {"type": "string"},
                                    "title": {"type": "string"},
                                    "status": {"type": "integer"},
                                    "detail": {"type": "string"},
                                    "code": {"type": "string"},
                                    "detailCode": {"type": "string"},
                                    "retryable": {"type": "boolean"},
                                    "fields": {"type": "object"},
                                },
                            }
                        }
                    },
                }
            },
        },
    }
