"""Opening a session for the door's client: ``session/new`` and the agent's state.

``session/new`` creates a Tether session (the client's ``cwd``; its ``mcpServers``
joined to the configured ones; the method it authenticated with) and starts its
agent at once, so the answer carries what the agent's own ``session/new`` said:
``modes`` and ``configOptions`` (ACP's NewSessionResponse). ``session/load`` and
``session/resume`` answer them too, from the owner's agent (started if it retired):
the owner keeps them current as modes and options are set (:mod:`tether.owner.agent_jobs`).
The cost is the agent's start at ``session/new`` rather than at the first prompt;
the first turn then runs warm.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

from tether import _aio, operations, sessions
from tether.acp_door import turns
from tether.errors import TetherError, UsageError

if TYPE_CHECKING:
    from tether.acp_door.door import DoorOptions

__all__ = ["agent_state", "new_session"]

STATE_KEYS = ("modes", "configOptions")  # the agent's session state ACP answers carry


async def agent_state(key: str, *, tolerant: bool = False) -> dict[str, Any]:
    """The agent's ``modes`` and ``configOptions`` for session ``key``.

    ``session/new`` starts the agent (``start_agent``, queued). ``tolerant`` (load,
    resume) asks the owner's ``status`` first -- answered at once, so attaching never
    waits behind another party's running turn -- and starts the agent only when none
    runs and nothing is queued; an agent that cannot start now costs the answer only
    those fields (the session is open, its history replayed; the first prompt reports
    the failure).

    Raises:
        TetherError subclasses: the agent could not be started (unless ``tolerant``).
    """
    try:
        if tolerant:
            status = await turns.control(key, "status", {})
            state = status.get("agentSession")
            if status.get("agentConnected") and isinstance(state, dict):
                return {k: state[k] for k in STATE_KEYS if state.get(k) is not None}
            if status.get("currentRequest") is not None or status.get("queueDepth"):
                return {}  # busy: the turn under way starts the agent; never wait on it
        started = await turns.control(key, "start_agent", {})
    except TetherError:
        if tolerant:
            return {}
        raise
    return {k: started[k] for k in STATE_KEYS if started.get(k) is not None}


async def new_session(
    options: DoorOptions, params: dict[str, Any], auth_method: str | None
) -> tuple[str, str, dict[str, Any]]:
    """Create the session ``session/new`` asks for and start its agent: (key, name,
    the agent's state). A session whose agent cannot start is closed again: the
    client gets the error and no session.

    Raises:
        UsageError: a bad ``cwd``.
        TetherError subclasses: the agent could not be started.
    """
    cwd = params.get("cwd")
    if not isinstance(cwd, str) or not os.path.isabs(cwd):
        raise UsageError("cwd must be an absolute path")
    if not os.path.isdir(cwd):  # noqa: ASYNC240 -- one stat of a local path
        raise UsageError(f"cwd {cwd} is not a directory")
    cwd = os.path.realpath(cwd)  # noqa: ASYNC240 -- a few lstat()s of a local path
    name = "acp-" + os.urandom(6).hex()
    key = sessions.session_key(options.agent_scope, cwd, name)
    owner_options = dict(options.owner_options)
    servers = params.get("mcpServers")
    if isinstance(servers, list) and servers:
        # The client's servers join the configured ones (the owner passes them all
        # to the agent's session/new; ``tether.mcp_servers.servers_for``).
        configured = owner_options.get("mcp_servers") or []
        owner_options["mcp_servers"] = [*configured, *servers]
    if auth_method is not None:
        owner_options["auth"] = {auth_method: options.auth_config.get(auth_method, "")}
    conn, _created = await asyncio.to_thread(
        operations.ensure_session,
        key,
        name=name,
        argv=list(options.agent_argv),
        label=options.agent_label,
        cwd=cwd,
        options=owner_options,
    )
    conn.close()
    try:
        state = await agent_state(key)
    except BaseException:
        await _aio.cleanup(asyncio.to_thread(operations.close_session, key), what="close")
        raise
    return key, name, state
