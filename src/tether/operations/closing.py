"""Closing a session (and first every session it spawned): through its owner, or offline.

Offline -- no owner runs -- what dead owners left is swept by proof (reconcile) and the
session's one ``session_ended`` recorded under its lock.
"""

from __future__ import annotations

import os
import time

from tether import sessions
from tether.errors import NoSession, OwnerUnavailable
from tether.ipc.client import OwnerConnection
from tether.operations.connecting import connect_or_start, owner_or_lock
from tether.policy import access

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any
OWNER_EXIT_WAIT_S = 10.0  # after its close answer, an owner releases its lock and exits
RELISTEN_WAIT_S = 3.0  # an owner whose socket was removed binds it again within ~1 s


def close_session(key: str, *, discard: bool = False) -> dict[str, Any]:
    """End the session and, first, every session it spawned (:mod:`tether.policy.cascade`).

    Each one ends through its owner (which proves the tree gone), or offline.
    ``discard`` (seed 000's ``discardPersistentState``): the agent also deletes the
    session's conversation (``session/delete``, where advertised) -- this session's only,
    not its children's; an owner is started for it if none runs.

    Raises:
        NoSession: no such session (offline only; a live owner is its session's proof).
        VisibilityDenied: the requester may not close this session.
    """
    access.authorize(key, "close")
    from tether.policy.cascade import close_tree

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
    conn = _owner_if_any(key)
    if conn is None and discard:
        conn = _owner_to_discard(key)
    if conn is not None:
        return _close_live(conn, discard=discard, cascade_from=cascade_from)
    from tether.state.registry import Registry
    from tether.supervise.members import escaped_of, survivors_of
    from tether.supervise.reconcile import reconcile, unproven_of

    with Registry() as registry:
        if registry.session(key) is None:
            raise NoSession("no such session", session_key=key)
        # The CLI's check ran without a registry; a recorded member is asked again here.
        access.authorize(key, "close", registry=registry)
        decisions = reconcile(registry, session_key=key)
        survivors = survivors_of(decisions)
        _close_offline(registry, key, how="closed with no owner running", survivors=survivors)
    return {
        "action": "session_closed",
        "sessionKey": key,
        "survivors": survivors,
        "escaped": escaped_of(decisions),
        "unproven": unproven_of(decisions),  # claimants of its runs: never signalled
        "reconciled": decisions,
    }


def _owner_if_any(key: str) -> OwnerConnection | None:
    """The session's owner, or None when none holds its lock.

    One that holds the lock but does not answer may be stopping, or binding its socket
    again after it was removed from under it (a cleared ``run/``, a tmp cleaner): we wait
    for it and close through it. Saying "closed, no owner was running" instead would
    leave it running, with its agent.

    Raises:
        OwnerUnavailable: it holds the lock but still does not answer; nothing changed.
    """
    try:
        return OwnerConnection.connect(sessions.socket_path(key))  # stopping ones too
    except OwnerUnavailable:
        pass
    found = owner_or_lock(key, RELISTEN_WAIT_S)
    if isinstance(found, int):
        os.close(found)  # no owner: the offline close takes the lock again to write
        return None
    if found is None:
        raise OwnerUnavailable(
            f"an owner holds the session's lock but does not answer at"
            f" {sessions.socket_path(key)} (waited {RELISTEN_WAIT_S:g} s); nothing was"
            " changed. Retry; `tether status` shows its pid",
            session_key=key,
        )
    return found


def _owner_to_discard(key: str) -> OwnerConnection | None:
    """An owner for a close --discard when none runs: only the agent can delete its
    session, so one is started when the session has an agent-side conversation."""
    from tether.state.registry import Registry

    with Registry() as registry:
        session = registry.session(key)
        if session is None or session.state == "closed" or not session.acp_session_id:
            return None
    return connect_or_start(key, action="close")


def _close_live(
    conn: OwnerConnection, *, discard: bool = False, cascade_from: str | None = None
) -> dict[str, Any]:
    """Close through the owner on ``conn``; return once that owner process is gone."""
    from tether.ipc.peer import peer_pidfd, wait_owner_gone

    with conn:
        pidfd = peer_pidfd(conn.sock)
        payload: dict[str, Any] = {"discard": True} if discard else {}
        if cascade_from:
            payload["cascadeFrom"] = cascade_from
        result = conn.request("close", payload)
        # Return only once the owner is gone (its lock released): scripts that look for
        # leftover processes, or remove TETHER_HOME, right after `close` see none.
        hosted = conn.hello.get("hosted") is True
        result["ownerExited"] = wait_owner_gone(conn.sock, hosted, pidfd, OWNER_EXIT_WAIT_S)
    if hosted:
        result["ownerHosted"] = True  # its session host lives on (tether.sessionhost)
    return result


def _close_offline(
    registry: Any, key: str, *, how: str, survivors: list[int] | None = None
) -> None:
    """Mark an open session closed and record its one ``session_ended`` (no owner runs).

    The record goes into the session's journal, whose writer is whoever holds the
    session's lock: we take it for the write (an owner that holds it records its own).
    """
    session = registry.session(key)
    if session is None or session.state == "closed":
        return
    registry.update_session(key, state="closed", closed_at=time.time())
    lock_fd = sessions.try_lock(key)
    if lock_fd is None:
        return
    try:
        from tether import owner_lost

        if owner_lost.was_lost(registry, key, session):
            owner_lost.correct_offline(registry, key)  # its turn ends owner-lost first
        # We hold the lock, so no owner runs: whatever a killed one left in its row
        # (its pid, "idle") is stale, and `sessions list` must not show it.
        registry.update_session(
            key,
            owner_status="stopped",
            owner_pid=None,
            owner_socket=None,
            queue_depth=0,
            current_request=None,
        )
        registry.journal_append(
            key,
            "session_ended",
            {
                "reason": "closed",
                "terminatedBy": "daemon",
                "message": f"the session was closed ({how})",
                "agentWasRunning": False,
                "survivors": survivors or [],
                "ownerGeneration": session.owner_generation,
            },
        )
    finally:
        os.close(lock_fd)
