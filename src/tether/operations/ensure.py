"""Creating (or reopening) a session and making sure its owner serves (``sessions new|ensure``)."""

from __future__ import annotations

from tether import access
from tether.errors import UsageError
from tether.ipc.client import OwnerConnection
from tether.operations.closing import _close_live, _close_offline
from tether.operations.connecting import connect, connect_or_start

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any


def ensure_session(
    key: str,
    *,
    name: str,
    argv: list[str],
    label: str,
    cwd: str,
    options: dict[str, Any],
    fresh: bool = False,
    env: dict[str, str] | None = None,
    override: dict[str, Any] | None = None,
    sandboxed: bool = False,
    resume_session: str | None = None,
) -> tuple[OwnerConnection, bool]:
    """Create (or reopen) the session and make sure its owner serves.

    Args:
        resume_session: attach the session to this existing agent-side conversation
            (acpx's ``--resume-session``): its agent resumes it, strictly.
        options: the owner settings of a session created now.
        fresh: close an existing session of that key first (acpx's ``sessions new``).
        override: settings an owner started now must use although the session exists
            (flags given explicitly on this call, as ``connect_or_start``'s ``options``).
        sandboxed: create the session sandboxed: its agent's requests are clamped to its
            own tree (``--sandboxed``). Recorded when the session is created.

    Returns:
        (a connection to the serving owner, whether the session was created).

    Raises:
        VisibilityDenied: the requester may not replace or reuse this session, or may
            not spawn a session of this agent (the agent-to-agent policy).
        UsageError: ``sandboxed`` for an open session that is not sandboxed.
        InvalidName: ``name`` holds characters that would forge output
            (:func:`tether.names.check_name`; every door's names come here).
    """
    from tether.names import check_name
    from tether.registry import Registry

    check_name(name)

    with Registry() as registry:
        existing = registry.session(key)
        reused = existing is not None and existing.state != "closed" and not fresh
        if existing is not None and existing.state != "closed":
            # Reusing (ensure) or replacing (new) a session is driving it.
            access.authorize(key, "close" if fresh else "send", registry=registry)
            if resume_session and not fresh and existing.acp_session_id != resume_session:
                raise UsageError(
                    "the session is open on another conversation; `sessions new"
                    " --resume-session` replaces it"
                )
        requester = access.current_requester(registry)
        if reused and sandboxed and existing is not None and not existing.sandboxed:
            raise UsageError(
                "--sandboxed is recorded when a session is created; this one is open and"
                " not sandboxed (`sessions new --sandboxed` replaces it)",
                session_key=key,
            )
        if not reused:
            access.authorize_spawn(requester, label)
    if fresh:
        conn = connect(key)
        if conn is not None:
            _close_live(conn)  # its owner gone, the new one starts without a busy race
    with Registry() as registry:
        if fresh:
            _close_offline(registry, key, how="replaced by `sessions new`")
        _session, created = registry.upsert_session(
            key=key,
            name=name,
            agent_command=list(argv),
            agent_label=label,
            cwd=cwd,
            options=options,
            # Recorded only when the row is created: the requester owns what it spawns.
            owner=access.spawn_owner(requester, label, sandboxed=sandboxed),
        )
        if resume_session:
            merged = {**_session.options, "resume_session": resume_session}
            registry.update_session(key, acp_session_id=resume_session, options=merged)
    return connect_or_start(key, env=env, options=override), created
