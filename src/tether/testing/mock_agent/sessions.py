"""The mock agent's session methods: initialize, authenticate, and ``session/*`` but prompt.

``session/new``, ``load``, ``resume``, ``fork``, ``list``, ``delete``, ``close``,
``set_mode`` and ``set_config_option``, and ``logout``; each answers -32601 unless its
flag advertises it (see the package docstring). Handlers are ``(agent, id, params)``.
"""

from __future__ import annotations

import os
import sys

from tether.testing.mock_agent.protocol import (
    AGENT_VERSION,
    AUTH_REQUIRED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    PROTOCOL_VERSION,
    RESOURCE_NOT_FOUND,
    Session,
)
from tether.testing.mock_agent.script import VERBS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from tether.testing.mock_agent.agent import MockAgent
    from tether.testing.mock_agent.protocol import Json, Msg


MODES = (
    {"id": "default", "name": "Default", "description": "Ask before acting"},
    {"id": "plan", "name": "Plan", "description": "Plan only, change nothing"},
    {"id": "yolo", "name": "Yolo", "description": "Act without asking"},
)
MODELS = (
    {"value": "mock-small", "name": "Mock small"},
    {"value": "mock-large", "name": "Mock large"},
)


def _initialize(agent: MockAgent, req_id: Json, params: Msg) -> None:
    if agent.opts.hang_on_initialize:
        return
    session_caps: Msg = {}
    if agent.opts.resume_session:
        session_caps["resume"] = {}
    if agent.opts.close_session:
        session_caps["close"] = {}
    if agent.opts.system_prompt:
        session_caps["systemPrompt"] = {"mode": {"override": {}}}
    for cap, on in (
        ("fork", agent.opts.fork_session),
        ("list", agent.opts.list_sessions),
        ("delete", agent.opts.delete_session),
    ):
        if on:
            session_caps[cap] = {}
    result: Msg = {
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": agent.opts.load_session,
            "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
            "mcpCapabilities": {"http": False, "sse": False},
            "sessionCapabilities": session_caps,
            **({"auth": {"logout": {}}} if agent.opts.logout else {}),
        },
        "agentInfo": {
            "name": agent.opts.agent_name,
            "title": "Tether mock agent",
            "version": AGENT_VERSION,
        },
        "authMethods": (
            [{"id": "mock-key", "name": "Mock key", "description": "Set MOCK_AGENT_KEY"}]
            if agent.opts.auth_required
            else []
        ),
    }
    agent.respond(req_id, result)


def _authenticate(agent: MockAgent, req_id: Json, params: Msg) -> None:
    if params.get("methodId") != "mock-key":
        agent.error(req_id, AUTH_REQUIRED, f"Unknown auth method {params.get('methodId')!r}")
    elif not os.environ.get("MOCK_AGENT_KEY"):
        agent.error(req_id, AUTH_REQUIRED, "Authentication failed: MOCK_AGENT_KEY is not set")
    else:
        agent.authenticated = True
        agent.respond(req_id, {})


def _needs_auth(agent: MockAgent, req_id: Json) -> bool:
    if agent.opts.auth_required and not agent.authenticated:
        agent.error(req_id, AUTH_REQUIRED, "Authentication required")
        return True
    return False


def _session_extras(agent: MockAgent, session: Session) -> Msg:
    extras: Msg = {}
    if agent.opts.modes:
        extras["modes"] = {"currentModeId": session.mode, "availableModes": list(MODES)}
    if agent.opts.config_options:
        extras["configOptions"] = _config_options(session)
    return extras


def _config_options(session: Session) -> list[Msg]:
    return [
        {
            "id": "model",
            "name": "Model",
            "category": "model",
            "type": "select",
            "currentValue": session.model,
            "options": list(MODELS),
        },
        {"id": "fast", "name": "Fast", "type": "boolean", "currentValue": session.fast},
    ]


def _open_session(agent: MockAgent, sid: str) -> Session:
    session = agent.sessions.get(sid)
    if session is None:
        session = agent.sessions[sid] = Session(sid)
    session.closed = False
    return session


def live_session(agent: MockAgent, req_id: Json, params: Msg) -> Session | None:
    sid = params.get("sessionId")
    session = agent.sessions.get(sid) if isinstance(sid, str) else None
    if session is None or session.closed:
        agent.error(req_id, INTERNAL_ERROR, "Session not found")
        return None
    return session


def _session_new(agent: MockAgent, req_id: Json, params: Msg) -> None:
    if agent.opts.hang_on_new_session or _needs_auth(agent, req_id):
        return
    session = _open_session(agent, f"mock-{agent.next_session}")
    agent.next_session += 1
    servers = params.get("mcpServers")
    agent.mcp_servers = servers if isinstance(servers, list) else []
    agent.new_params = {k: v for k, v in params.items() if k not in ("cwd", "mcpServers")}
    agent.respond(req_id, {"sessionId": session.sid, **_session_extras(agent, session)})
    commands = [
        {"name": verb, "description": f"mock verb {verb}", "input": {"hint": hint}}
        if hint
        else {"name": verb, "description": f"mock verb {verb}"}
        for verb, (hint, _, _) in VERBS.items()
    ]
    agent.update(
        session, {"sessionUpdate": "available_commands_update", "availableCommands": commands}
    )


def _restore(agent: MockAgent, req_id: Json, params: Msg, *, replay: bool) -> None:
    sid = params.get("sessionId")
    if not isinstance(sid, str):
        agent.error(req_id, INVALID_PARAMS, "Invalid params: sessionId")
        return
    if _needs_auth(agent, req_id):
        return
    if sid.startswith("gone-"):
        agent.error(req_id, RESOURCE_NOT_FOUND, f"Resource not found: session {sid}")
        return
    session = _open_session(agent, sid)
    agent.new_params = {
        "method": "session/load" if replay else "session/resume",
        **{k: v for k, v in params.items() if k not in ("cwd", "mcpServers", "sessionId")},
    }
    if replay:
        agent.chunk(session, "previous prompt", "user_message_chunk")
        agent.chunk(session, "previous answer")
    agent.respond(req_id, _session_extras(agent, session))


def _session_load(agent: MockAgent, req_id: Json, params: Msg) -> None:
    if not agent.opts.load_session:
        agent.error(req_id, METHOD_NOT_FOUND, "Method not found: session/load")
        return
    _restore(agent, req_id, params, replay=True)


def _session_resume(agent: MockAgent, req_id: Json, params: Msg) -> None:
    if not agent.opts.resume_session:
        agent.error(req_id, METHOD_NOT_FOUND, "Method not found: session/resume")
        return
    _restore(agent, req_id, params, replay=False)


def _session_close(agent: MockAgent, req_id: Json, params: Msg) -> None:
    if not agent.opts.close_session:
        agent.error(req_id, METHOD_NOT_FOUND, "Method not found: session/close")
        return
    sid = params.get("sessionId")
    session = agent.sessions.get(sid) if isinstance(sid, str) else None
    if session is None:
        agent.error(req_id, INTERNAL_ERROR, "Session not found")
        return
    for turn in list(agent.turns.values()):
        if turn.session is session:
            agent.cancel(turn, as_error=False)
    session.closed = True
    agent.respond(req_id, {})


def _session_fork(agent: MockAgent, req_id: Json, params: Msg) -> None:
    if not agent.opts.fork_session:
        agent.error(req_id, METHOD_NOT_FOUND, "Method not found: session/fork")
        return
    parent = params.get("sessionId")
    if not isinstance(parent, str) or _needs_auth(agent, req_id):
        if not isinstance(parent, str):
            agent.error(req_id, INVALID_PARAMS, "Invalid params: sessionId")
        return
    session = _open_session(agent, f"fork-{agent.next_session}")
    agent.next_session += 1
    session.forked_from = parent
    agent.respond(req_id, {"sessionId": session.sid, **_session_extras(agent, session)})


def _session_list(agent: MockAgent, req_id: Json, params: Msg) -> None:
    if not agent.opts.list_sessions:
        agent.error(req_id, METHOD_NOT_FOUND, "Method not found: session/list")
        return
    cwd = params.get("cwd") if isinstance(params.get("cwd"), str) else "/"
    listed = [{"sessionId": "mock-stored-1", "cwd": cwd, "title": "stored conversation"}]
    listed += [{"sessionId": sid, "cwd": cwd} for sid, s in agent.sessions.items() if not s.closed]
    agent.respond(req_id, {"sessions": listed})


def _session_delete(agent: MockAgent, req_id: Json, params: Msg) -> None:
    if not agent.opts.delete_session:
        agent.error(req_id, METHOD_NOT_FOUND, "Method not found: session/delete")
        return
    sid = params.get("sessionId")
    if isinstance(sid, str):
        agent.sessions.pop(sid, None)
    if agent.opts.log_stderr:
        sys.stderr.write(f"mock-agent deleted {sid}\n")
    agent.respond(req_id, {})


def _logout(agent: MockAgent, req_id: Json, params: Msg) -> None:
    if not agent.opts.logout:
        agent.error(req_id, METHOD_NOT_FOUND, "Method not found: logout")
        return
    agent.authenticated = False
    agent.respond(req_id, {})


def _set_mode(agent: MockAgent, req_id: Json, params: Msg) -> None:
    if not agent.opts.modes:
        agent.error(req_id, METHOD_NOT_FOUND, "Method not found: session/set_mode")
        return
    session = live_session(agent, req_id, params)
    if session is None:
        return
    mode = params.get("modeId")
    if mode not in {m["id"] for m in MODES}:
        agent.error(req_id, INVALID_PARAMS, f"Invalid params: unknown mode {mode!r}")
        return
    assert isinstance(mode, str)
    session.mode = mode
    agent.update(session, {"sessionUpdate": "current_mode_update", "currentModeId": mode})
    agent.respond(req_id, {})


def _set_config_option(agent: MockAgent, req_id: Json, params: Msg) -> None:
    if not agent.opts.config_options:
        agent.error(req_id, METHOD_NOT_FOUND, "Method not found: session/set_config_option")
        return
    session = live_session(agent, req_id, params)
    if session is None:
        return
    config_id, value = params.get("configId"), params.get("value")
    if config_id == "model" and value in {m["value"] for m in MODELS}:
        assert isinstance(value, str)
        session.model = value
    elif config_id == "fast" and isinstance(value, bool):
        session.fast = value
    else:
        agent.error(req_id, INVALID_PARAMS, f"Invalid params: {config_id!r} = {value!r}")
        return
    agent.respond(req_id, {"configOptions": _config_options(session)})


#: Request handlers by method (``session/prompt`` is the agent's own).
HANDLERS: dict[str, Callable[[MockAgent, Json, Msg], None]] = {
    "initialize": _initialize,
    "authenticate": _authenticate,
    "session/new": _session_new,
    "session/load": _session_load,
    "session/resume": _session_resume,
    "session/close": _session_close,
    "session/fork": _session_fork,
    "session/list": _session_list,
    "session/delete": _session_delete,
    "logout": _logout,
    "session/set_mode": _set_mode,
    "session/set_config_option": _set_config_option,
}
