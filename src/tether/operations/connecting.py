"""Reaching a serving owner: connect (the warm path), connect-or-start, fencing a silent one.

One connect-or-start for every front door, with the IPC version check (in
:class:`tether.ipc.client.OwnerConnection`'s ``hello``). Standard library only until no
owner answers: the registry and the owner launcher are imported on the cold path.
"""

from __future__ import annotations

import time

from tether import sessions
from tether.errors import (
    CallTimeout,
    NoSession,
    OwnerUnavailable,
    OwnerUnresponsive,
    TetherError,
)
from tether.ipc.client import CONNECT_TIMEOUT_S, OwnerConnection, connect_with_retry
from tether.policy import access

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any
START_DEADLINE_S = 15.0  # to get a serving owner when none was running


def connect(key: str, *, timeout: float = CONNECT_TIMEOUT_S) -> OwnerConnection | None:
    """A connection to the session's live owner if it accepts work, else None.

    An owner that is shutting down (idle TTL, close, signal) says so in its ``hello``;
    we let it go and report None, so the caller starts a new one.
    """
    return _try_connect(sessions.socket_path(key), timeout)[0]


def owner_or_lock(key: str, wait_s: float) -> OwnerConnection | int | None:
    """The session's serving owner (a connection), or else its lock (an open descriptor,
    to close: no owner runs). While an owner holds the lock without serving -- stopping,
    or binding its removed socket again (:meth:`tether.owner.lock.SessionLock.relisten`)
    -- look again every 50 ms for up to ``wait_s``; None once that ran out."""
    deadline = time.monotonic() + wait_s
    while True:
        conn = connect(key, timeout=min(CONNECT_TIMEOUT_S, deadline - time.monotonic()))
        if conn is not None:
            return conn
        fd = sessions.try_lock(key)
        if fd is not None:
            return fd
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def _try_connect(path: str, timeout: float) -> tuple[OwnerConnection | None, bool]:
    """(a serving owner's connection or None, whether an owner is there but silent)."""
    try:
        conn = OwnerConnection.connect(path, timeout=max(0.05, timeout))
    except OwnerUnresponsive:
        return None, True
    except OwnerUnavailable:
        return None, False
    return _serving(conn), False


def serving_generation(key: str) -> int | None:
    """The generation of the owner serving session ``key`` now, or None if none serves."""
    conn = connect(key)
    if conn is None:
        return None
    with conn:
        return conn.generation


def _serving(conn: OwnerConnection) -> OwnerConnection | None:
    if conn.hello.get("stopping"):
        conn.close()
        return None
    return conn


def connect_or_start(
    key: str,
    *,
    env: dict[str, str] | None = None,
    options: dict[str, Any] | None = None,
    deadline: float | None = None,
    action: str = "send",
) -> OwnerConnection:
    """A serving owner of session ``key``: the warm path first, else start one.

    An owner that holds the session but has not answered (stopped, hung) and whose
    heartbeat has been silent for the session's ``unresponsive_after`` is fenced: its
    identity verified, SIGKILLed through a pidfd (its keeper then ends the agent tree),
    and replaced by a new owner (generation + 1). A busy owner keeps beating and is
    never fenced.

    Args:
        key: the session key.
        env: extra environment for a newly started owner (and so its agents).
        options: owner settings that a newly started owner must use (later flags such
            as ``--ttl``); merged into the session's stored options before the start.
        deadline: the caller's deadline (``time.monotonic()``); every wait -- the hello,
            the owner's start, a silent owner -- ends by it. None: ``START_DEADLINE_S``
            for a start.

    Raises:
        NoSession: the session does not exist or was closed (the owner refuses).
        CallTimeout: ``deadline`` passed (``phase`` says while doing what).
        OwnerUnresponsive / OwnerUnavailable: no serving owner within START_DEADLINE_S.
        VisibilityDenied: the requester may not ``action`` (send, set) this session.
    """
    access.authorize(key, action)
    limit = deadline if deadline is not None else time.monotonic() + START_DEADLINE_S
    path = sessions.socket_path(key)
    conn, silent = _try_connect(path, min(CONNECT_TIMEOUT_S, limit - time.monotonic()))
    if conn is not None:
        return conn
    from tether.owner_launch import READY_DEADLINE_S, spawn_owner_daemon

    if options:
        _update_options(key, options)
    while True:
        if silent and _fence_if_silent(key):
            silent = False
        if not silent:
            remaining = limit - time.monotonic()
            if remaining <= 0:
                raise _expired(key, deadline, "starting the session owner", silent=False)
            try:
                message = spawn_owner_daemon(
                    key, env=env, deadline_s=min(READY_DEADLINE_S, remaining)
                )
            except OwnerUnavailable:
                if deadline is not None and time.monotonic() >= deadline:
                    raise _expired(
                        key, deadline, "starting the session owner", silent=False
                    ) from None
                raise
            if message.get("ready"):
                return OwnerConnection.connect(
                    str(message.get("socket") or path),
                    timeout=max(0.05, min(CONNECT_TIMEOUT_S, limit - time.monotonic())),
                )
        # Busy: another owner holds the session's lock. Either it is starting (another
        # caller's: it binds soon), stopping (idle TTL, close, signal: it lets the lock
        # go soon, and then nobody would start an owner for us), or silent. So connect
        # for a short while; when that fails or finds it stopping, start ours again.
        try:
            conn = _serving(connect_with_retry(path, deadline=min(limit, time.monotonic() + 0.5)))
            silent = False
        except OwnerUnresponsive:
            conn, silent = None, True
        except OwnerUnavailable:
            conn, silent = None, False
        if conn is not None:
            return conn
        if time.monotonic() >= limit:
            phase = "waiting for a silent session owner" if silent else "starting the session owner"
            raise _expired(key, deadline, phase, silent=silent)
        time.sleep(0.05)  # a bounded retry on a rare race, never the warm path


def _fence_if_silent(key: str) -> bool:
    from tether.owner_fence import fence_if_silent  # the cold path: it reads the registry

    return fence_if_silent(key)


def _expired(key: str, deadline: float | None, phase: str, *, silent: bool) -> TetherError:
    """The error for a caller whose wait for a serving owner ran out."""
    detail = ""
    if silent:
        from tether.owner_fence import owner_silence

        info = owner_silence(key)
        if info is not None:
            detail = (
                f"; owner pid {info['ownerPid']} has not beaten for {info['heartbeatAgeS']:g} s"
                f" (replaced after {info['unresponsiveAfterS']:g} s)"
            )
    if deadline is not None:
        return CallTimeout(f"the call's --timeout passed while {phase}{detail}", phase=phase)
    if silent:
        return OwnerUnresponsive(f"the session owner does not answer{detail}", session_key=key)
    return OwnerUnavailable(
        f"the session owner did not become available within {START_DEADLINE_S:g} s"
    )


def _update_options(key: str, options: dict[str, Any]) -> None:
    from tether.state.registry import Registry

    with Registry() as registry:
        session = registry.session(key)
        if session is None or session.state == "closed":
            raise NoSession("no open session for this key", session_key=key)
        merged = dict(session.options)
        merged.update({k: v for k, v in options.items() if v is not None})
        registry.update_session(key, options=merged)
