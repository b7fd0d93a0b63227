"""The five session tools of ``tether mcp``, each under the visibility check.

The requester is this process's: ``tether mcp`` runs inside the agent tree of the
session it was handed to (the agent starts it), with ``TETHER_SESSION_KEY`` set by
Tether, so :mod:`tether.policy.requester` proves it from the kernel exactly as for a
``tether`` command the agent runs from its shell. Started anywhere else with a session
key, it is an unproven claim and gets that session alone (``self``).

===================  ===========================================================
tool                 does
===================  ===========================================================
``sessions_list``    the sessions the requester may see, with ownership fields
``sessions_history`` a session's recorded events (check: history)
``session_status``   a session's status snapshot (default: the requester's own)
``sessions_send``    prompt another session and wait for its answer (check: send)
``sessions_spawn``   start a new session owned by the requester, optionally prompt it
===================  ===========================================================
"""

from __future__ import annotations

import os
from typing import Any

from tether import sessions
from tether.errors import UsageError
from tether.mcp.server import Tool, ToolError
from tether.policy import access, ownership

__all__ = ["build_tools"]

DEFAULT_SEND_TIMEOUT_S = 600.0


def _key_arg(args: dict[str, Any], name: str = "sessionKey") -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"{name} must be a non-empty string")
    return value.strip()


def _describe(session: Any, instance_id: str) -> dict[str, Any]:
    return {
        "sessionKey": session.key,
        "name": session.name,
        "state": session.state,
        "cwd": session.cwd,
        **ownership.ownership_json(session, instance_id),
    }


def sessions_list(args: dict[str, Any]) -> dict[str, Any]:
    from tether.state.registry import Registry

    include_closed = bool(args.get("includeClosed", False))
    with Registry() as reg:
        rows = access.visible_sessions(reg, reg.sessions(include_closed=include_closed))
        return {"sessions": [_describe(s, reg.instance_id) for s in rows]}


def sessions_history(args: dict[str, Any]) -> dict[str, Any]:
    from tether.state.registry import Registry

    key = _key_arg(args)
    limit = args.get("limit", 20)
    if not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise ToolError("limit must be an integer from 1 to 1000")
    with Registry() as reg:
        access.authorize(key, "history", registry=reg)
        return {"sessionKey": key, "events": reg.events(key, limit=limit)}


def _own_key() -> str | None:
    resolved = access.current_requester()
    return resolved.spawner_key


def session_status(args: dict[str, Any]) -> dict[str, Any]:
    key = args.get("sessionKey") or _own_key()
    if not isinstance(key, str):
        raise ToolError("sessionKey is required (this server has no session of its own)")
    access.authorize(key, "status")
    from tether import operations

    return operations.status(key)


def _prompt(key: str, text: str, timeout_s: float) -> dict[str, Any]:
    """Run one turn of session ``key`` and collect the agent's text."""
    chunks: list[str] = []

    def on_frame(frame: dict[str, Any]) -> None:
        acp = frame.get("frame") if frame.get("type") == "update" else None
        update = ((acp or {}).get("params") or {}).get("update") or {}
        if update.get("sessionUpdate") == "agent_message_chunk":
            content = update.get("content") or {}
            if content.get("type") == "text":
                chunks.append(str(content.get("text", "")))

    from tether import operations

    deadline_ms = int(timeout_s * 1000)
    payload = operations.prompt_payload([{"type": "text", "text": text}], client="mcp")
    with operations.connect_or_start(key) as conn:
        rid = operations.submit(conn, payload, deadline_ms=deadline_ms)
        end = operations.run_turn(conn, key, rid, on_frame, deadline_ms=deadline_ms)
    return {"sessionKey": key, "stopReason": end.result.get("stopReason"), "text": "".join(chunks)}


def _timeout(args: dict[str, Any]) -> float:
    value = args.get("timeoutSeconds", DEFAULT_SEND_TIMEOUT_S)
    if not isinstance(value, (int, float)) or value <= 0:
        raise ToolError("timeoutSeconds must be a positive number")
    return float(value)


def sessions_send(args: dict[str, Any]) -> dict[str, Any]:
    key = _key_arg(args)
    message = args.get("message")
    if not isinstance(message, str) or not message.strip():
        raise ToolError("message must be non-empty text")
    if key == _own_key():
        # Our own owner is busy with the very turn that called this tool: its FIFO
        # would wait on us while we wait on it.
        raise ToolError("a session cannot send to itself from inside its own turn")
    access.authorize(key, "send")
    return _prompt(key, message, _timeout(args))


def sessions_spawn(args: dict[str, Any]) -> dict[str, Any]:
    from tether import agents, config, operations
    from tether.state.registry import Registry

    agent = args.get("agent")
    if not isinstance(agent, str) or not agent.strip():
        raise ToolError("agent must name an agent (a registry name such as 'codex')")
    name = args.get("name") or ""
    cwd = os.path.abspath(str(args.get("cwd") or os.getcwd()))
    if not isinstance(name, str):
        raise ToolError("name must be a string")
    if not os.path.isdir(cwd):
        raise ToolError(f"cwd is not a directory: {cwd}")
    sandboxed = args.get("sandboxed", False)
    if not isinstance(sandboxed, bool):
        raise ToolError("sandboxed must be true or false")
    cfg = config.load(cwd)
    if not agents.is_agent_name(agent, cfg.get("agents")):
        raise ToolError(f"unknown agent {agent!r}: spawn takes a registry name")
    argv = agents.resolve(agent, cfg.get("agents"))
    key = sessions.session_key(sessions.agent_scope(agent, argv, named=True), cwd, name)
    options = operations.settings(cfg)
    with Registry() as reg:
        resolved = access.current_requester(reg)
        access.authorize_spawn(resolved, agent)  # the agent-to-agent policy (our config)
        parent = reg.session(resolved.spawner_key) if resolved.spawner_key else None
        existing = reg.session(key)
        if existing is not None and existing.state != "closed":
            raise UsageError(
                f"a session {name or '(default)'} of {agent} in {cwd} is already open;"
                " pick another name"
            )
        # The row first, with its owner and settings (the table every door uses);
        # ensure_session then finds it open and keeps it.
        reg.upsert_session(
            key=key,
            name=name,
            agent_command=argv,
            agent_label=agent,
            cwd=cwd,
            owner=access.spawn_owner(resolved, agent, parent, sandboxed=sandboxed),
            options=options,
        )
    conn, _created = operations.ensure_session(
        key, name=name, argv=argv, label=agent, cwd=cwd, options=options
    )
    conn.close()
    out: dict[str, Any] = {"sessionKey": key, "name": name, "agent": agent, "cwd": cwd}
    with Registry() as reg:
        row = reg.session(key)
        out["sandboxed"] = bool(row is not None and row.sandboxed)
    message = args.get("message")
    if isinstance(message, str) and message.strip():
        out["reply"] = _prompt(key, message, _timeout(args))
    return out


_KEY = {"type": "string", "description": "the session key (from sessions_list)"}


def build_tools() -> list[Tool]:
    """The five tools, in the order ``tools/list`` shows them."""
    obj = "object"
    return [
        Tool(
            "sessions_list",
            "List the Tether sessions you may see (your own, those you spawned, and more"
            " as configured), with who owns and spawned each.",
            {"type": obj, "properties": {"includeClosed": {"type": "boolean"}}},
            sessions_list,
        ),
        Tool(
            "sessions_history",
            "Read the recorded events of a session you may see.",
            {
                "type": obj,
                "properties": {"sessionKey": _KEY, "limit": {"type": "integer"}},
                "required": ["sessionKey"],
            },
            sessions_history,
        ),
        Tool(
            "sessions_send",
            "Send a prompt to another session you may see and wait for its answer.",
            {
                "type": obj,
                "properties": {
                    "sessionKey": _KEY,
                    "message": {"type": "string"},
                    "timeoutSeconds": {"type": "number"},
                },
                "required": ["sessionKey", "message"],
            },
            sessions_send,
        ),
        Tool(
            "sessions_spawn",
            "Start a new agent session that you own (e.g. agent 'codex' to review a diff),"
            " optionally with a first message; it is closed when your session closes."
            " Another agent's session needs the agent-to-agent policy to allow it;"
            " sandboxed: the child sees and drives only its own tree.",
            {
                "type": obj,
                "properties": {
                    "agent": {"type": "string"},
                    "name": {"type": "string"},
                    "cwd": {"type": "string"},
                    "message": {"type": "string"},
                    "timeoutSeconds": {"type": "number"},
                    "sandboxed": {"type": "boolean"},
                },
                "required": ["agent"],
            },
            sessions_spawn,
        ),
        Tool(
            "session_status",
            "The status of a session you may see (default: your own).",
            {"type": obj, "properties": {"sessionKey": _KEY}},
            session_status,
        ),
    ]
