"""The operator's immediate end of a session (seed 004): live or offline, idempotent."""

from __future__ import annotations

import os
import time

from tether.errors import (
    NoSession,
    OwnerShuttingDown,
    OwnerUnavailable,
)
from tether.ipc.client import OwnerConnection
from tether.operations.closing import OWNER_EXIT_WAIT_S
from tether.operations.connecting import START_DEADLINE_S, owner_or_lock
from tether.policy import access

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any


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
    :mod:`tether.policy.cascade`).

    Raises:
        NoSession: no such session.
        VisibilityDenied: the requester may not terminate this session.
        OwnerUnavailable: an owner held the session and did not let go in time.
    """
    access.authorize(key, "terminate")
    from tether.policy.cascade import close_tree

    # The family's owners check our authority over `key` (cascadeFrom), as close does.
    return close_tree(
        key, lambda k: _terminate_one(k, by, deadline_s, cascade_from=key if k != key else None)
    )


def _terminate_one(
    key: str, by: dict[str, Any] | None, deadline_s: float, *, cascade_from: str | None = None
) -> dict[str, Any]:
    deadline = time.monotonic() + deadline_s
    while True:
        # An owner that is stopping: wait for its lock, then look again.
        found = owner_or_lock(key, max(0.0, deadline - time.monotonic()))
        if found is None:
            raise OwnerUnavailable(
                f"the session's owner did not let go within {deadline_s:g} s", session_key=key
            )
        if isinstance(found, int):
            try:
                return _terminate_offline(key, by or {})
            finally:
                os.close(found)
        try:
            return _terminate_live(found, by, cascade_from)
        except OwnerShuttingDown:
            pass  # it began stopping meanwhile (a close, the idle TTL)


def _terminate_live(
    conn: OwnerConnection, by: dict[str, Any] | None, cascade_from: str | None = None
) -> dict[str, Any]:
    """Terminate through the owner on ``conn``; return once that owner process is gone."""
    from tether.ipc.peer import peer_pidfd, wait_owner_gone

    payload: dict[str, Any] = {"by": by} if by else {}
    if cascade_from:
        payload["cascadeFrom"] = cascade_from
    with conn:
        pidfd = peer_pidfd(conn.sock)
        result = conn.request("terminate", payload)
        hosted = conn.hello.get("hosted") is True
        result["ownerExited"] = wait_owner_gone(conn.sock, hosted, pidfd, OWNER_EXIT_WAIT_S)
    if hosted:
        result["ownerHosted"] = True  # its session host lives on (tether.sessionhost)
    return result


def _terminate_offline(key: str, by: dict[str, Any]) -> dict[str, Any]:
    """Terminate with no owner running; the caller holds the session's lock."""
    from tether.state.registry import Registry
    from tether.supervise.members import escaped_of, survivors_of
    from tether.supervise.reconcile import reconcile, unproven_of

    with Registry() as registry:
        session = registry.session(key)
        if session is None:
            raise NoSession("no such session", session_key=key)
        if session.state == "closed":
            return _ended_report(registry, key)
        access.authorize(key, "terminate", registry=registry)  # recorded members: see close
        decisions = reconcile(registry, session_key=key)
        survivors = survivors_of(decisions)
        registry.update_session(key, state="closed", closed_at=time.time())
        event: dict[str, Any] = {
            "reason": "terminated",
            "terminatedBy": "daemon",
            "message": "the session was terminated (no owner was running)",
            "exitCode": None,
            "stderr": "",
            "agentWasRunning": False,
            "survivors": survivors,
            "ownerGeneration": session.owner_generation,
            "requestedBy": {"pid": os.getpid(), "uid": os.getuid(), **by},
        }
        registry.journal_append(key, "session_ended", event)
    return {
        "action": "session_terminated",
        "terminated": True,
        "reason": "terminated",
        "terminatedBy": "daemon",
        "alreadyEnded": False,
        "sessionKey": key,
        "survivors": survivors,
        "escaped": escaped_of(decisions),
        "unproven": unproven_of(decisions),  # claimants of its runs: never signalled
        "agentWasRunning": False,
        "reconciled": decisions,
    }


def _ended_report(registry: Any, key: str) -> dict[str, Any]:
    """How an ended session ended (its journal's ``session_ended``): terminate's no-op."""
    from tether import _fastjson

    row = registry.journal_last_of_kind(key, "session_ended")
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
