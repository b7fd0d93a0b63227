"""Operations built on ACP's newer methods; part of :mod:`tether.operations` (which
re-exports them lazily, off the thin CLI path).

- :func:`fork_session` -- ``session/fork``: a new Tether session, warm at once, whose
  agent continues the parent's conversation.
- :func:`resume_agent_session` -- ``sessions new --resume-session ID``: a Tether session
  attached to a conversation the agent already has (strict: no silent new session).
- :func:`agent_sessions` -- ``session/list`` of the agent's own sessions.
- :func:`logout` -- ACP ``logout``.

The parent of a fork is recorded in the child's options as ``fork_from``
(``{"sessionKey", "acpSessionId"}``; ``forkedFrom`` in ``sessions show``), not in the
ownership columns: ``parent_session_key`` / ``spawned_by`` say which agent tree created a
session (visibility, the close cascade), and a fork belongs to whoever asked for it --
closing the parent must not close its forks.

The last two need no session: they run a short-lived agent (spawned under a lease and
proven gone like any other run) that only initializes, asks, and is torn down.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tether.errors import NoSession, TetherError, UsageError
from tether.policy import access

__all__ = ["agent_sessions", "fork_session", "logout", "resume_agent_session"]

# Options of a session that describe its conversation's origin, not its owner settings.
_LINEAGE_KEYS = ("fork_from", "resume_session")


def _start_agent(key: str, conn: Any) -> dict[str, Any]:
    """Have the owner on ``conn`` bring the agent up now; close the session if it fails."""
    from tether.operations import close_session

    try:
        with conn:
            return dict(conn.request("start_agent", {}))
    except TetherError:
        try:
            close_session(key)
        except TetherError:
            pass  # the start's error is the one to report
        raise


def fork_session(
    parent_key: str,
    key: str,
    *,
    name: str,
    env: dict[str, str] | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Fork session ``parent_key`` into a new session ``key`` named ``name``.

    The new session gets the parent's agent command, directory and owner settings
    (``options`` override some); its owner starts at once and brings its agent up with
    ``session/fork`` of the parent's ACP session, so a refusal is reported here.

    Returns:
        The owner's ``agent_started`` answer plus ``sessionKey``, ``name``,
        ``forkedFrom`` and ``ownerPid``.

    Raises:
        NoSession: no open parent session.
        UsageError: the parent has no agent-side conversation yet, or a session named
            ``name`` is open already.
        NotAdvertised: the agent does not offer ``session/fork`` (the new session is
            closed again).
        VisibilityDenied: the requester may not drive the parent.
    """
    from tether.operations import ensure_session
    from tether.state.registry import Registry

    access.authorize(parent_key, "send")
    with Registry() as registry:
        parent = registry.session(parent_key)
        if parent is None or parent.state == "closed":
            raise NoSession("no open session to fork", session_key=parent_key)
        if not parent.acp_session_id:
            raise UsageError(
                f"session {parent.name or '(default)'} has no conversation to fork yet:"
                " prompt it first"
            )
        existing = registry.session(key)
        if existing is not None and existing.state != "closed":
            raise UsageError(f"a session named {name!r} is open already: choose another name")
    settings = {k: v for k, v in parent.options.items() if k not in _LINEAGE_KEYS}
    settings.update({k: v for k, v in (options or {}).items() if v is not None})
    fork_from = {"sessionKey": parent_key, "acpSessionId": parent.acp_session_id}
    settings["fork_from"] = fork_from
    conn, _created = ensure_session(
        key,
        name=name,
        argv=list(parent.agent_command),
        label=parent.agent_label,
        cwd=parent.cwd,
        options=settings,
        env=env,
        sandboxed=bool(parent.sandboxed),  # a fork of a sandboxed session stays clamped
    )
    owner_pid = conn.hello.get("ownerPid")
    # The fork starts from the parent's mode and options: the owner replays them on the
    # forked session (a no-op where the agent kept them) and after any restart.
    with Registry() as registry:
        registry.update_session(
            key, desired_mode=parent.desired_mode, desired_config=dict(parent.desired_config)
        )
    started = _start_agent(key, conn)
    return {
        **started,
        "action": "session_forked",
        "sessionKey": key,
        "name": name,
        "forkedFrom": fork_from,
        "ownerPid": owner_pid,
    }


def resume_agent_session(key: str, conn: Any) -> dict[str, Any]:
    """Bring up the agent of a session made with ``--resume-session``: it must resume.

    Raises:
        AgentRequestError: the agent does not know that session (the Tether session is
            closed again).
        NotAdvertised: the agent can neither resume nor load sessions.
    """
    return _start_agent(key, conn)


async def _with_agent(
    argv: list[str], cwd: str, call: Any, *, auth: dict[str, str], env: dict[str, str] | None
) -> Any:
    from tether import metrics
    from tether.acp.connection import ClientOptions
    from tether.live_agent import AgentConfig, LiveAgent
    from tether.state.registry import Registry
    from tether.supervise.run_state import TerminationReason

    registry = Registry()
    metrics.attach(registry)
    try:
        cfg = AgentConfig(argv=argv, cwd=cwd, env=env, client=ClientOptions(auth=auth))
        live = await LiveAgent.start(cfg, registry, open_session=False)
        try:
            return await call(live.conn)
        finally:
            await asyncio.shield(live.aclose(TerminationReason.CLOSE, close_session=False))
    finally:
        metrics.attach(None)
        registry.close()


def agent_sessions(
    argv: list[str],
    cwd: str,
    *,
    cursor: str | None = None,
    any_cwd: bool = False,
    auth: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``session/list``: one page of the agent's own sessions (of ``cwd`` unless
    ``any_cwd``), ``{sessions: [{sessionId, cwd, title, updatedAt}], nextCursor}``.

    Raises:
        NotAdvertised: the agent does not offer ``session/list``.
    """

    async def call(conn: Any) -> Any:
        return await conn.list_sessions(cwd=None if any_cwd else cwd, cursor=cursor)

    page = asyncio.run(_with_agent(argv, cwd, call, auth=auth or {}, env=env))
    return {
        "action": "agent_sessions",
        "sessions": page.get("sessions") or [],
        "nextCursor": page.get("nextCursor"),
    }


def logout(
    argv: list[str],
    cwd: str,
    *,
    auth: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """ACP ``logout``: the agent forgets its sign-in.

    Raises:
        NotAdvertised: the agent does not offer ``logout``.
    """

    async def call(conn: Any) -> Any:
        await conn.logout()

    asyncio.run(_with_agent(argv, cwd, call, auth=auth or {}, env=env))
    return {"action": "logged_out"}
