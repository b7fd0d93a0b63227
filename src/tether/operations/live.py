"""Requests only a live owner can answer: cancel a turn, answer an agent's question."""

from __future__ import annotations

from tether import sessions
from tether.errors import OwnerUnavailable
from tether.ipc.client import OwnerConnection
from tether.policy import access

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any


def _must_exist(key: str) -> None:
    """No owner answers: a session that does not exist (or was closed) is ``NoSession``,
    as for every other command (exit 4), not "nothing to cancel". Only on this path is the
    state database read."""
    from tether.errors import NoSession
    from tether.state.registry import Registry

    with Registry() as registry:
        session = registry.session(key)
    if session is None or session.state == "closed":
        raise NoSession("no such session" if session is None else "the session is closed")


def cancel(key: str, target: str | None = None, *, wait: bool = False) -> dict[str, Any]:
    """Cancel the running turn, or remove the queued request ``target``.

    ``wait``: when a running turn was cancelled, answer once it has ended (bounded by
    the session's ``cancelGrace``), saying whether the agent honoured the cancel
    (``honoured``; ``agentRetired`` when it ignored it and was restarted).

    Raises:
        NoSession: no owner runs and the session does not exist or is closed.
    """
    access.authorize(key, "cancel")
    try:
        conn = OwnerConnection.connect(sessions.socket_path(key))
    except OwnerUnavailable:
        _must_exist(key)
        return {"action": "cancel_result", "cancelled": False, "reason": "no running owner"}
    payload: dict[str, Any] = {"targetRequestId": target} if target else {}
    if wait:
        payload["wait"] = True
    with conn:
        return conn.request("cancel", payload)


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
        NoSession: no owner runs and the session does not exist or is closed.
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
        _must_exist(key)
        raise UnknownInteraction(
            f"no question {interaction_id!r} is waiting: the session's owner is not running",
            interaction_id=interaction_id,
        ) from None
    payload: dict[str, Any] = {"interactionId": interaction_id, "answer": answer}
    if content is not None:
        payload["content"] = content
    with conn:
        return conn.request("answer", payload)
