"""A session's status: the live owner's snapshot, or the registry's view when none answers.

Both shapes carry the same documented keys, so scripts need no special case.
"""

from __future__ import annotations

from tether import sessions
from tether.errors import OwnerUnavailable, OwnerUnresponsive
from tether.ipc.client import OwnerConnection
from tether.policy import access

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any
STATUS_HELLO_S = 1.0  # `status` must answer at once, from the registry if need be


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


def no_session_status(key: str) -> dict[str, Any]:
    """The status of a session nobody has: the documented keys, ``status`` ``no-session``."""
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
        "attached": [],
        "sessionKey": key,
    }


def offline_status(key: str) -> dict[str, Any]:
    """The session's status from the registry alone (no owner answers).

    The documented keys are always present, so scripts need no special case:
    ``status`` is ``no-session``, ``closed``, ``dead`` (the last agent run ended in an
    error, or the owner was lost: killed, and its records corrected here by whoever
    proved it dead -- see :mod:`tether.owner_lost`) or ``idle``.
    """
    from tether.owner_lost import correct_if_dead
    from tether.state.registry import Registry

    with Registry() as registry:
        correct_if_dead(registry, key)  # a killed owner: its records corrected first
        session = registry.session(key)
        if session is None:
            return no_session_status(key)
        # The agent's runs: an agent's terminals (tether.process_terminals) have leases of
        # their own.
        leases = [x for x in registry.leases(session_key=key) if x.backend_id != "terminal"]
        lease = leases[-1] if leases else None
        last_end = session.last_end or {}
        # dead: the last agent run ended in an error, or the owner was lost (killed)
        # and no owner has started since.
        dead = session.state != "closed" and (
            last_end.get("reason") == "error" or session.owner_status == "dead"
        )
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
            "attached": [],  # no owner: nobody watches live
            "sessionKey": key,
            "name": session.name,
        }
