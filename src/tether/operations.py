"""What a caller can do to a session: the one implementation every front door calls.

The CLI calls these functions directly; the library (and later front doors: an HTTP
gateway, an ACP or MCP server) call them through ``asyncio.to_thread`` and then wrap the
connected socket into asyncio streams, speaking frames with the shared sans-IO protocol
(:class:`tether.ipc.protocol.ResponseTracker`, :class:`tether.ipc.lines.LineReader`).
So there is one connect-or-start (with the IPC version check), one ensure, one offline
status shape and one offline close.

The warm path -- a live owner answers -- computes the socket path from the session key
and talks IPC with the blocking client: standard library only, no asyncio, no sqlite3
(``tests/integration/test_import_budget.py``). The registry is imported only when no
owner answers.

Functions here take a session key (:func:`tether.sessions.session_key`) and use the
current ``TETHER_HOME`` (:func:`tether.paths.use_home` selects another per call).
"""

from __future__ import annotations

import os
import time

from tether import access, sessions
from tether.errors import (
    CallTimeout,
    NoSession,
    OwnerShuttingDown,
    OwnerUnavailable,
    OwnerUnresponsive,
    TetherError,
    UsageError,
)
from tether.ipc.client import CONNECT_TIMEOUT_S, OwnerConnection, connect_with_retry

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "START_DEADLINE_S",
    "agent_sessions",
    "answer",
    "cancel",
    "close_session",
    "connect",
    "connect_or_start",
    "describe",
    "ensure_session",
    "fork_session",
    "history",
    "list_sessions",
    "logout",
    "offline_status",
    "resume_agent_session",
    "status",
    "terminate",
    "transcript",
    "watch",
]

START_DEADLINE_S = 15.0  # to get a serving owner when none was running
STATUS_HELLO_S = 1.0  # `status` must answer at once, from the registry if need be
OWNER_EXIT_WAIT_S = 10.0  # after its close answer, an owner releases its lock and exits


def connect(key: str, *, timeout: float = CONNECT_TIMEOUT_S) -> OwnerConnection | None:
    """A connection to the session's live owner if it accepts work, else None.

    An owner that is shutting down (idle TTL, close, signal) says so in its ``hello``;
    we let it go and report None, so the caller starts a new one.
    """
    return _try_connect(sessions.socket_path(key), timeout)[0]


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
    from tether.registry import Registry

    with Registry() as registry:
        session = registry.session(key)
        if session is None or session.state == "closed":
            raise NoSession("no open session for this key", session_key=key)
        merged = dict(session.options)
        merged.update({k: v for k, v in options.items() if v is not None})
        registry.update_session(key, options=merged)


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
    """
    from tether.registry import Registry

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


def status(key: str) -> dict[str, Any]:
    """The live owner's status snapshot, or the registry's view when no owner answers.

    An owner that holds the session but does not say hello within ``STATUS_HELLO_S``
    (stopped, hung) is reported at once as ``unresponsive``, with its pid and the age of
    its last heartbeat -- never as a healthy idle session.
    """
    access.authorize(key, "status")
    try:
        conn = OwnerConnection.connect(sessions.socket_path(key), timeout=STATUS_HELLO_S)
    except OwnerUnresponsive:
        from tether.owner_fence import owner_silence

        snapshot = offline_status(key)
        silence = owner_silence(key) or {}
        snapshot.update(silence, status="unresponsive")
        return snapshot
    except OwnerUnavailable:
        return offline_status(key)
    with conn:
        return conn.request("status", {})


def offline_status(key: str) -> dict[str, Any]:
    """The session's status from the registry alone (no owner answers).

    The documented keys are always present, so scripts need no special case:
    ``status`` is ``no-session``, ``closed``, ``dead`` (the last agent run ended in an
    error) or ``idle``.
    """
    from tether.registry import Registry

    with Registry() as registry:
        session = registry.session(key)
        if session is None:
            return {
                "action": "status_snapshot",
                "status": "no-session",
                "ownerPid": None,
                "ownerGeneration": None,
                "agentPid": None,
                "keeperPid": None,
                "currentRequest": None,
                "currentKind": None,
                "queueDepth": 0,
                "leaseState": None,
                "sessionKey": key,
            }
        # The agent's runs: an agent's terminals (tether.terminals) have leases of their own.
        leases = [x for x in registry.leases(session_key=key) if x.backend_id != "terminal"]
        lease = leases[-1] if leases else None
        last_end = session.last_end or {}
        dead = session.state != "closed" and last_end.get("reason") == "error"
        return {
            "action": "status_snapshot",
            "status": "closed" if session.state == "closed" else ("dead" if dead else "idle"),
            "ownerPid": None,
            "ownerGeneration": session.owner_generation,
            "agentPid": None,
            "keeperPid": None,
            "currentRequest": None,
            "currentKind": None,
            "queueDepth": 0,
            "leaseState": lease.state if lease else None,
            "leaseId": lease.lease_id if lease else None,
            "lastPromptTime": session.last_prompt_at,
            "acpSessionId": session.acp_session_id,
            "lastEnd": last_end or None,
            "exitCode": last_end.get("exitCode"),
            "sessionKey": key,
            "name": session.name,
        }


def cancel(key: str, target: str | None = None) -> dict[str, Any]:
    """Cancel the running turn, or remove the queued request ``target``."""
    access.authorize(key, "cancel")
    try:
        conn = OwnerConnection.connect(sessions.socket_path(key))
    except OwnerUnavailable:
        return {"action": "cancel_result", "cancelled": False, "reason": "no running owner"}
    with conn:
        return conn.request("cancel", {"targetRequestId": target} if target else {})


def close_session(key: str, *, discard: bool = False) -> dict[str, Any]:
    """End the session and, first, every session it spawned (:mod:`tether.cascade`).

    Each one ends through its owner (which proves the tree gone), or offline.
    ``discard`` (seed 000's ``discardPersistentState``): the agent also deletes the
    session's conversation (``session/delete``, where advertised) -- this session's only,
    not its children's; an owner is started for it if none runs.

    Raises:
        NoSession: no such session (offline only; a live owner is its session's proof).
        VisibilityDenied: the requester may not close this session.
    """
    access.authorize(key, "close")
    from tether.cascade import close_tree

    def one(k: str) -> dict[str, Any]:
        # The session itself (--discard applies to it alone), or one of its family.
        if k == key:
            return _close_one(k, discard=discard)
        return _close_one(k, cascade_from=key)

    return close_tree(key, one)


def _close_one(
    key: str, *, discard: bool = False, cascade_from: str | None = None
) -> dict[str, Any]:
    """End one session: through its owner, or offline.

    Offline -- no owner runs -- we sweep whatever its dead owners left (reconcile: verify,
    then reap) and mark it closed. ``cascade_from``: this close is part of closing that
    session's family; its owner checks our authority over that session instead.
    """
    try:
        conn = OwnerConnection.connect(sessions.socket_path(key))
    except OwnerUnavailable:
        conn = None
    if conn is None and discard:
        conn = _owner_to_discard(key)
    if conn is not None:
        return _close_live(conn, discard=discard, cascade_from=cascade_from)
    from tether.registry import Registry
    from tether.supervise.reconcile import reconcile

    with Registry() as registry:
        if registry.session(key) is None:
            raise NoSession("no such session", session_key=key)
        decisions = reconcile(registry, session_key=key)
        _close_offline(registry, key, how="closed with no owner running")
    return {"action": "session_closed", "sessionKey": key, "survivors": [], "reconciled": decisions}


def _owner_to_discard(key: str) -> OwnerConnection | None:
    """An owner for a close --discard when none runs: only the agent can delete its
    session, so one is started when the session has an agent-side conversation."""
    from tether.registry import Registry

    with Registry() as registry:
        session = registry.session(key)
        if session is None or session.state == "closed" or not session.acp_session_id:
            return None
    return connect_or_start(key, action="close")


def terminate(
    key: str, *, by: dict[str, Any] | None = None, deadline_s: float = START_DEADLINE_S
) -> dict[str, Any]:
    """The operator's immediate end of the session (seed 004). Idempotent.

    Through a live owner: no new turn, no waiting on the agent -- its tree is ended at
    once (TERM -> grace -> KILL through the keeper, then proof), the end is recorded
    (``session_ended``, reason ``terminated``) and every attached party told. With no
    owner running, we take the session's lock (so none can start meanwhile), reap what
    dead owners left by proof, and record the end once. A session that has already
    ended is not touched: the answer reports how it ended (``alreadyEnded``).

    Args:
        key: the session key.
        by: who asks (recorded in the ``session_ended`` entry with the peer's pid/uid).
        deadline_s: how long to wait for an owner that is stopping to let go.

    Returns:
        ``{terminated: True, reason, terminatedBy, alreadyEnded, sessionKey, ...}``.

    Sessions the session spawned are terminated first (as ``close`` does,
    :mod:`tether.cascade`).

    Raises:
        NoSession: no such session.
        VisibilityDenied: the requester may not terminate this session.
        OwnerUnavailable: an owner held the session and did not let go in time.
    """
    access.authorize(key, "terminate")
    from tether.cascade import close_tree

    # The family's owners check our authority over `key` (cascadeFrom), as close does.
    return close_tree(
        key, lambda k: _terminate_one(k, by, deadline_s, cascade_from=key if k != key else None)
    )


def _terminate_one(
    key: str, by: dict[str, Any] | None, deadline_s: float, *, cascade_from: str | None = None
) -> dict[str, Any]:
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            conn: OwnerConnection | None = OwnerConnection.connect(sessions.socket_path(key))
        except OwnerUnavailable:
            conn = None
        if conn is not None and not conn.hello.get("stopping"):
            try:
                return _terminate_live(conn, by, cascade_from)
            except OwnerShuttingDown:
                pass  # it began stopping meanwhile (a close, the idle TTL)
        elif conn is not None:
            conn.close()
        lock_fd = sessions.try_lock(key)
        if lock_fd is not None:
            try:
                return _terminate_offline(key, by or {})
            finally:
                os.close(lock_fd)
        if time.monotonic() >= deadline:
            raise OwnerUnavailable(
                f"the session's owner did not let go within {deadline_s:g} s", session_key=key
            )
        time.sleep(0.05)  # an owner is stopping: wait for its lock, then look again


def _terminate_live(
    conn: OwnerConnection, by: dict[str, Any] | None, cascade_from: str | None = None
) -> dict[str, Any]:
    """Terminate through the owner on ``conn``; return once that owner process is gone."""
    from tether.owner_fence import peer_pidfd, wait_exit

    payload: dict[str, Any] = {"by": by} if by else {}
    if cascade_from:
        payload["cascadeFrom"] = cascade_from
    with conn:
        pidfd = peer_pidfd(conn.sock)
        result = conn.request("terminate", payload)
    result["ownerExited"] = wait_exit(pidfd, OWNER_EXIT_WAIT_S)
    return result


def _terminate_offline(key: str, by: dict[str, Any]) -> dict[str, Any]:
    """Terminate with no owner running; the caller holds the session's lock."""
    from tether.journal import store
    from tether.registry import Registry
    from tether.supervise.reconcile import reconcile

    with Registry() as registry:
        session = registry.session(key)
        if session is None:
            raise NoSession("no such session", session_key=key)
        if session.state == "closed":
            return _ended_report(registry, key)
        decisions = reconcile(registry, session_key=key)
        registry.update_session(key, state="closed", closed_at=time.time())
        event: dict[str, Any] = {
            "reason": "terminated",
            "terminatedBy": "daemon",
            "message": "the session was terminated (no owner was running)",
            "exitCode": None,
            "stderr": "",
            "agentWasRunning": False,
            "survivors": [],
            "ownerGeneration": session.owner_generation,
            "requestedBy": {"pid": os.getpid(), "uid": os.getuid(), **by},
        }
        store.append_now(registry._db, key, "session_ended", event)
    return {
        "action": "session_terminated",
        "terminated": True,
        "reason": "terminated",
        "terminatedBy": "daemon",
        "alreadyEnded": False,
        "sessionKey": key,
        "survivors": [],
        "agentWasRunning": False,
        "reconciled": decisions,
    }


def _ended_report(registry: Any, key: str) -> dict[str, Any]:
    """How an ended session ended (its journal's ``session_ended``): terminate's no-op."""
    from tether import _fastjson
    from tether.journal import store

    row = store.last_of_kind(registry._db, key, "session_ended")
    event: dict[str, Any] = _fastjson.loads(row[4]) if row else {}
    return {
        "action": "session_terminated",
        "terminated": True,
        "reason": event.get("reason", "closed"),
        "terminatedBy": event.get("terminatedBy", "daemon"),
        "message": event.get("message", "the session had ended"),
        "alreadyEnded": True,
        "endedAt": row[1] if row else None,
        "sessionKey": key,
    }


def _close_live(
    conn: OwnerConnection, *, discard: bool = False, cascade_from: str | None = None
) -> dict[str, Any]:
    """Close through the owner on ``conn``; return once that owner process is gone."""
    from tether.owner_fence import peer_pidfd, wait_exit

    with conn:
        pidfd = peer_pidfd(conn.sock)
        payload: dict[str, Any] = {"discard": True} if discard else {}
        if cascade_from:
            payload["cascadeFrom"] = cascade_from
        result = conn.request("close", payload)
    # Return only once the owner is gone (its lock released): scripts that look for
    # leftover processes, or remove TETHER_HOME, right after `close` see none.
    result["ownerExited"] = wait_exit(pidfd, OWNER_EXIT_WAIT_S)
    return result


def _close_offline(registry: Any, key: str, *, how: str) -> None:
    """Mark an open session closed and record its one ``session_ended`` (no owner runs).

    The record goes into the session's journal, whose writer is whoever holds the
    session's lock: we take it for the write (an owner that holds it records its own).
    """
    from tether.journal import store

    session = registry.session(key)
    if session is None or session.state == "closed":
        return
    registry.update_session(key, state="closed", closed_at=time.time())
    lock_fd = sessions.try_lock(key)
    if lock_fd is None:
        return
    try:
        store.append_now(
            registry._db,
            key,
            "session_ended",
            {
                "reason": "closed",
                "terminatedBy": "daemon",
                "message": f"the session was closed ({how})",
                "agentWasRunning": False,
                "survivors": [],
                "ownerGeneration": session.owner_generation,
            },
        )
    finally:
        os.close(lock_fd)


def list_sessions(*, include_closed: bool = False) -> list[dict[str, Any]]:
    """The sessions of this home the requester may see (open ones unless ``include_closed``)."""
    from tether.registry import Registry

    with Registry() as registry:
        rows = access.visible_sessions(registry, registry.sessions(include_closed=include_closed))
        return [describe(s, registry.instance_id) for s in rows]


def describe(session: Any, instance_id: str | None = None) -> dict[str, Any]:
    """A registry session as the documented record (``sessions list``/``show``)."""
    from tether.ownership import ownership_json

    record = {
        "key": session.key,
        "name": session.name,
        "state": session.state,
        "agent": session.agent_label,
        "agentCommand": session.agent_command,
        "cwd": session.cwd,
        "acpSessionId": session.acp_session_id,
        "createdAt": session.created_at,
        "lastPromptAt": session.last_prompt_at,
        "ownerPid": session.owner_pid,
        "ownerGeneration": session.owner_generation,
        "ownerStatus": session.owner_status,
        "lastEnd": session.last_end,
    }
    fork = session.options.get("fork_from") if isinstance(session.options, dict) else None
    if isinstance(fork, dict):
        record["forkedFrom"] = fork  # {sessionKey, acpSessionId}: where `sessions fork` began
    record.update(ownership_json(session, instance_id or ""))
    return record


def history(key: str, *, limit: int | None = None) -> list[dict[str, Any]]:
    """One summary per turn (request id, times, duration, stop reason, preview), oldest
    first; the last ``limit`` when given. Reads the journal; needs no owner.

    Raises:
        NoSession: no such session.
        VisibilityDenied: the requester may not read this session's history.
    """
    from tether.journal import render, store
    from tether.registry import Registry

    with Registry() as registry:
        if registry.session(key) is None:
            raise NoSession("no such session", session_key=key)
        access.authorize(key, "history", registry=registry)
        turns = render.turns(store.turn_rows(registry._db, key))
    if limit is not None:
        turns = turns[-limit:] if limit > 0 else []
    return [t.to_json() for t in turns]


def transcript(key: str, *, tail: int | None = None) -> list[dict[str, Any]]:
    """The conversation as turns (prompt, assistant text, tool calls, stop reason); the
    last ``tail`` turns when given. Reads the journal; needs no owner.

    Raises:
        NoSession: no such session.
        VisibilityDenied: the requester may not read this session's history.
    """
    from tether.journal import render, store
    from tether.registry import Registry

    with Registry() as registry:
        if registry.session(key) is None:
            raise NoSession("no such session", session_key=key)
        access.authorize(key, "history", registry=registry)
        start = store.turns_start(registry._db, key, tail)
        return render.transcript(store.iter_lines(registry._db, key, start))


def watch(key: str, emit: Any, **kwargs: Any) -> int:
    """Follow the session's journal (:func:`tether.journal.follow.follow_session`, whose
    keyword arguments it takes) once the visibility check allows it.

    The live part is checked again by the owner, against the kernel's view of us.

    Raises:
        NoSession: no such session.
        VisibilityDenied: the requester may not watch this session.
    """
    from tether.journal.follow import follow_session

    access.authorize(key, "watch")
    return int(follow_session(key, emit, **kwargs))


def answer(
    key: str, interaction_id: str, answer: str, *, content: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Answer a question the session's agent asked (an interaction): the first valid
    answer wins and reaches the agent; every controller sees who answered.

    Args:
        key: the session key.
        interaction_id: the question's id (``interaction`` frames, ``status``, the journal).
        answer: ``allow``, ``always``, ``deny``, ``deny-always`` or an offered option id
            (permissions); ``accept``, ``decline`` or ``cancel`` (elicitations).
        content: an accepted form's values (elicitations).

    Returns:
        ``{"action": "interaction_resolved", "interaction": {..., "answer", "how", "by"}}``.

    Raises:
        AlreadyAnswered: someone answered first (or a deadline, a cancel); not sent.
        UnknownInteraction: no such question is open (no owner runs: none can be).
        UsageError: the answer names nothing the agent offered; the question stays open.
        VisibilityDenied: the requester may not answer this session's questions (the
            visibility rules), or it is inside the session's own agent tree (the owner
            checks the answering process).
    """
    from tether.errors import UnknownInteraction

    access.authorize(key, "answer")
    try:
        conn = OwnerConnection.connect(sessions.socket_path(key))
    except OwnerUnavailable:
        raise UnknownInteraction(
            f"no question {interaction_id!r} is waiting: the session's owner is not running",
            interaction_id=interaction_id,
        ) from None
    payload: dict[str, Any] = {"interactionId": interaction_id, "answer": answer}
    if content is not None:
        payload["content"] = content
    with conn:
        return conn.request("answer", payload)


# --- ACP's newer methods (tether._operations_acp, imported only when used) -----------


def fork_session(parent_key: str, key: str, **kwargs: Any) -> dict[str, Any]:
    """See :func:`tether._operations_acp.fork_session` (``sessions fork``)."""
    from tether import _operations_acp

    return _operations_acp.fork_session(parent_key, key, **kwargs)


def resume_agent_session(key: str, conn: OwnerConnection) -> dict[str, Any]:
    """See :func:`tether._operations_acp.resume_agent_session` (``--resume-session``)."""
    from tether import _operations_acp

    return _operations_acp.resume_agent_session(key, conn)


def agent_sessions(argv: list[str], cwd: str, **kwargs: Any) -> dict[str, Any]:
    """See :func:`tether._operations_acp.agent_sessions` (``sessions list --agent-sessions``)."""
    from tether import _operations_acp

    return _operations_acp.agent_sessions(argv, cwd, **kwargs)


def logout(argv: list[str], cwd: str, **kwargs: Any) -> dict[str, Any]:
    """See :func:`tether._operations_acp.logout` (``tether logout``)."""
    from tether import _operations_acp

    return _operations_acp.logout(argv, cwd, **kwargs)
