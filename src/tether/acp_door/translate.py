"""The ACP front door's translations, with no I/O: Tether's records to ACP frames.

Everything the door says to its client that is not a plain relay is built here, so
the schema tests can check it without a process: the ``initialize`` answer, the
``session/update`` notifications a journal entry stands for (``session/load`` replays
them; a turn another party prompted is relayed with them), the ``SessionInfo`` of a
listed session and the cursor pages of ``session/list``, the ``_tether/session/ended``
notification built from a ``session_ended`` record, and the JSON-RPC error for one of
Tether's exceptions.

The ACP ``sessionId`` the door hands out is Tether's session key (a stable string that
names one session of one Tether home); the agent's own ACP session id stays inside
the owner, and every relayed update has its ``sessionId`` rewritten to the key.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from tether._version import __version__
from tether.acp.terminals import METHODS as TERMINAL_METHODS
from tether.errors import (
    AgentRequestError,
    NoSession,
    SessionClosed,
    TetherError,
    UsageError,
)

__all__ = [
    "ENDED_METHOD",
    "EXTENSIONS",
    "LIST_PAGE_SIZE",
    "PROTOCOL_VERSION",
    "RESOURCE_NOT_FOUND",
    "TERMINATE_METHOD",
    "ended_params",
    "error_for",
    "initialize_result",
    "list_page",
    "relay_methods",
    "relayed_notes",
    "relayed_update",
    "session_id_of",
    "session_info",
    "terminate_answer",
    "updates_of_entry",
]

PROTOCOL_VERSION: Final = 1
TERMINATE_METHOD: Final = "_tether/session/terminate"
ENDED_METHOD: Final = "_tether/session/ended"
EXTENSIONS: Final = (TERMINATE_METHOD, ENDED_METHOD)
LIST_PAGE_SIZE: Final = 100
# JSON-RPC error codes: ACP's "resource not found", and the JSON-RPC 2.0 ones.
RESOURCE_NOT_FOUND: Final = -32002
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603

# What we can promise about prompts without starting the agent: text and resource
# links are baseline ACP; the rest depends on the agent, which the owner starts lazily.
_BASE_PROMPT_CAPS: Final = {"image": False, "audio": False, "embeddedContext": False}


def initialize_result(
    agent_label: str, prompt_capabilities: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ``initialize`` answer: what Tether offers on top of the configured agent."""
    caps = dict(_BASE_PROMPT_CAPS)
    if prompt_capabilities:
        caps.update({k: v for k, v in prompt_capabilities.items() if isinstance(v, bool)})
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": True,
            "promptCapabilities": caps,
            "mcpCapabilities": {"http": False, "sse": False},
            "sessionCapabilities": {"list": {}, "resume": {}, "close": {}},
            "_meta": {
                "tether": {
                    "version": __version__,
                    "agent": agent_label,
                    "extensions": list(EXTENSIONS),
                    "sessionIds": "tether-session-key",
                }
            },
        },
        "agentInfo": {"name": "tether", "title": f"Tether ({agent_label})", "version": __version__},
        "authMethods": [],
    }


def relayed_update(frame: dict[str, Any], session_id: str) -> dict[str, Any] | None:
    """The ``session/update`` params to relay for an agent frame, or None (not an update).

    The agent's own session id is replaced by the door's (Tether's session key).
    """
    if frame.get("method") != "session/update":
        return None
    params = frame.get("params")
    if not isinstance(params, dict) or not isinstance(params.get("update"), dict):
        return None
    return {**params, "sessionId": session_id}


def updates_of_entry(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``update`` objects a journal entry stands for (possibly none).

    A prompt Tether sent to the agent becomes ``user_message_chunk`` updates, one per
    content block (how ACP replays the user's side); an agent's ``session/update`` is
    itself. Control records, requests and answers stand for nothing.
    """
    if entry.get("kind") != "acp":
        return []
    frame = entry.get("frame")
    if not isinstance(frame, dict):
        return []
    direction = entry.get("direction")
    if direction == "out" and frame.get("method") == "session/prompt":
        params = frame.get("params")
        blocks = params.get("prompt") if isinstance(params, dict) else None
        if not isinstance(blocks, list):
            return []
        return [
            {"sessionUpdate": "user_message_chunk", "content": block}
            for block in blocks
            if isinstance(block, dict)
        ]
    if direction == "in" and frame.get("method") == "session/update":
        params = frame.get("params")
        update = params.get("update") if isinstance(params, dict) else None
        return [update] if isinstance(update, dict) else []
    return []


def relayed_notes(
    key: str, entry: dict[str, Any], own_requests: set[str] | frozenset[str] = frozenset()
) -> list[tuple[str, dict[str, Any]]]:
    """The notifications (method, params) a door relays for journal entry ``entry`` of
    session ``key``: ``_tether/session/ended`` for the session's end; for a turn of the
    door's own (``own_requests``), the agent's updates as its IPC stream relayed them;
    for anyone else's, :func:`updates_of_entry`. One rule for the live relay and for a
    stream that resumes from the journal, so both say the same."""
    if entry.get("kind") == "session_ended":
        body = {k: v for k, v in entry.items() if k not in ("seq", "at", "kind")}
        return [(ENDED_METHOD, ended_params(key, body))]
    if entry.get("requestId") in own_requests:
        frame = entry.get("frame")
        relayed = (
            relayed_update(frame, key)
            if entry.get("direction") == "in" and isinstance(frame, dict)
            else None
        )
        return [("session/update", relayed)] if relayed else []
    return [
        ("session/update", {"sessionId": key, "update": update})
        for update in updates_of_entry(entry)
    ]


def ended_params(session_id: str, event: dict[str, Any]) -> dict[str, Any]:
    """``_tether/session/ended`` from a ``session_ended`` record (seed 004's fields)."""
    code = event.get("exitCode")
    stderr = event.get("stderr")
    return {
        "sessionId": session_id,
        "reason": str(event.get("reason") or "closed"),
        "terminatedBy": str(event.get("terminatedBy") or "daemon"),
        "message": str(event.get("message") or ""),
        "exitCode": code if isinstance(code, int) and not isinstance(code, bool) else None,
        "stderr": stderr if isinstance(stderr, str) and stderr else None,
    }


def _iso(ts: Any) -> str | None:
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        return None
    return datetime.fromtimestamp(float(ts), UTC).isoformat().replace("+00:00", "Z")


def session_info(record: dict[str, Any]) -> dict[str, Any]:
    """A Tether session record (:func:`tether.operations.describe`) as ACP ``SessionInfo``."""
    info: dict[str, Any] = {
        "sessionId": record["key"],
        "cwd": record["cwd"],
        "title": record.get("name") or None,
        "_meta": {
            "tether": {
                "name": record.get("name") or "",
                "agent": record.get("agent"),
                "state": record.get("state"),
            }
        },
    }
    updated = _iso(record.get("lastPromptAt") or record.get("createdAt"))
    if updated is not None:
        info["updatedAt"] = updated
    return info


def list_page(
    records: list[dict[str, Any]],
    *,
    cwd: str | None,
    cursor: str | None,
    size: int = LIST_PAGE_SIZE,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of ``session/list``: (SessionInfos, the next cursor or None).

    Sessions are ordered by creation time, then key; the cursor is the key of the last
    session of the previous page, so a session created meanwhile never shifts a page.

    Raises:
        UsageError: the cursor names no listed session.
    """
    rows = sorted(
        (r for r in records if cwd is None or r.get("cwd") == cwd),
        key=lambda r: (float(r.get("createdAt") or 0.0), str(r["key"])),
    )
    start = 0
    if cursor:
        keys = [str(r["key"]) for r in rows]
        if cursor not in keys:
            raise UsageError("unknown session/list cursor")
        start = keys.index(cursor) + 1
    page = rows[start : start + size]
    more = start + size < len(rows)
    return [session_info(r) for r in page], (str(page[-1]["key"]) if more and page else None)


def error_for(exc: BaseException) -> tuple[int, str, Any]:
    """(code, message, data) of the JSON-RPC error answering a request that raised ``exc``."""
    if isinstance(exc, NoSession | SessionClosed):
        return RESOURCE_NOT_FOUND, str(exc.message), {"tether": exc.to_wire()}
    if isinstance(exc, UsageError):
        return INVALID_PARAMS, str(exc.message), {"tether": exc.to_wire()}
    if isinstance(exc, AgentRequestError) and isinstance(exc.acp, dict):
        code = exc.acp.get("code")
        if isinstance(code, int) and not isinstance(code, bool):
            return code, str(exc.acp.get("message") or exc.message), exc.acp.get("data")
    if isinstance(exc, TetherError):
        return INTERNAL_ERROR, str(exc.message), {"tether": exc.to_wire()}
    return INTERNAL_ERROR, f"internal error: {type(exc).__name__}", None


def session_id_of(params: dict[str, Any]) -> str:
    """The request's ``sessionId``.

    Raises:
        UsageError: missing or not a non-empty string.
    """
    key = params.get("sessionId")
    if not isinstance(key, str) or not key:
        raise UsageError("sessionId is required")
    return key


def terminate_answer(result: dict[str, Any]) -> dict[str, Any]:
    """``_tether/session/terminate``'s answer from :func:`tether.operations.terminate`."""
    details = ("alreadyEnded", "survivors", "killMode", "teardownMs")
    return {
        "terminated": True,
        "reason": result.get("reason"),
        "terminatedBy": result.get("terminatedBy"),
        "_meta": {"tether": {k: result[k] for k in details if k in result}},
    }


def relay_methods(client_capabilities: dict[str, Any]) -> list[str]:
    """The agent-to-client methods a client serves itself, from its
    ``clientCapabilities`` (``fs.readTextFile``, ``fs.writeTextFile``, ``terminal``):
    what the door asks the owner to relay to it (:mod:`tether.owner.relays`)."""
    fs = client_capabilities.get("fs")
    fs = fs if isinstance(fs, dict) else {}
    methods = [
        method
        for cap, method in (
            ("readTextFile", "fs/read_text_file"),
            ("writeTextFile", "fs/write_text_file"),
        )
        if fs.get(cap) is True
    ]
    if client_capabilities.get("terminal") is True:
        methods.extend(sorted(TERMINAL_METHODS))
    return methods
