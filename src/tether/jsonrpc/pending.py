"""Our requests the peer has not answered: the ``_pending`` table of a JSON-RPC endpoint.

An entry is added when a request is sent and removed by exactly one of: the peer's answer
(:meth:`Outstanding.resolve`), the caller giving up (:meth:`Outstanding.abandon`) or the
peer dying (:meth:`Outstanding.fail_all`). Ids count up from 0 and are never reused, so a
late answer to a removed entry can never match anything again: it is *stale*. For the
last few abandoned ids the table remembers why (for the stale-drop log line) and whether
their late answer has since arrived (:meth:`Outstanding.was_answered_late`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from tether.jsonrpc.views import ExactIdView, is_our_id

# We remember why the last few ids were abandoned only to make the stale-drop log line say
# "late answer to session/prompt abandoned for deadline" instead of just "unknown id". The
# bound keeps a long-lived connection's memory flat; an id that fell out is still dropped.
_ABANDONED_MEMORY: Final = 256


@dataclass(slots=True)
class PendingRequest:
    """One of our requests that the peer has not answered yet.

    Attributes:
        id: the JSON-RPC id we sent.
        method: the method we called.
        session_id: the ACP session it belongs to, if any.
        sent_at: ``now`` when it was sent (monotonic seconds).
        deadline: when the caller wants to give up (monotonic seconds), or None.
        cancel_sent: whether ``session/cancel`` was already sent for it (prompts only).
    """

    id: int
    method: str
    session_id: str | None
    sent_at: float
    deadline: float | None
    cancel_sent: bool = False


class Outstanding:
    """The table of our unanswered requests, with the memory of abandoned ones."""

    __slots__ = ("_abandoned", "_late_answered", "_pending", "next_id")

    def __init__(self) -> None:
        self.next_id = 0
        self._pending: dict[int, PendingRequest] = {}
        self._abandoned: dict[int, str] = {}
        self._late_answered: set[int] = set()

    def add(
        self, method: str, session_id: str | None, now: float, deadline: float | None
    ) -> PendingRequest:
        """Record a request sent with id :attr:`next_id`, and move the counter on."""
        pending = PendingRequest(self.next_id, method, session_id, now, deadline)
        self._pending[self.next_id] = pending
        self.next_id += 1
        return pending

    def get(self, request_id: int) -> PendingRequest | None:
        """The pending request with this id, if any."""
        return self._pending.get(request_id)

    def resolve(self, request_id: object) -> tuple[PendingRequest | None, str | None]:
        """Remove the request an answer with ``request_id`` belongs to.

        Returns it, or ``(None, why)`` for a stale answer: ``why`` says why it was
        abandoned, or is None when the id is simply not pending.
        """
        # Our ids are ints; a str id can only be stale (or someone else's).
        if type(request_id) is not int:
            return None, None
        pending = self._pending.pop(request_id, None)
        if pending is not None:
            return pending, None
        why = self._abandoned.pop(request_id, None)
        if why is not None:
            # Remember that this abandoned request has now been answered (late): a caller
            # may wait for that before starting a new turn, so the abandoned turn's
            # trailing updates cannot bleed into the next one.
            self._late_answered.add(request_id)
        return None, why

    def abandon(self, request_id: int, reason: str) -> PendingRequest | None:
        """Remove a request we stop waiting for, remembering why; None if not pending."""
        pending = self._pending.pop(request_id, None)
        if pending is None:
            return None
        self._abandoned[request_id] = f"{pending.method} abandoned: {reason}"
        if len(self._abandoned) > _ABANDONED_MEMORY:
            del self._abandoned[next(iter(self._abandoned))]
        if len(self._late_answered) > _ABANDONED_MEMORY:
            self._late_answered.discard(min(self._late_answered))
        return pending

    def was_answered_late(self, request_id: int) -> bool:
        """Whether the (dropped) late answer to abandoned ``request_id`` has arrived."""
        return request_id in self._late_answered

    def expired(self, now: float) -> list[int]:
        """Ids whose deadline is at or before ``now``, oldest first."""
        return [
            p.id for p in self._pending.values() if p.deadline is not None and p.deadline <= now
        ]

    def next_deadline(self) -> float | None:
        """The earliest deadline among pending requests, or None if none has one."""
        deadlines = [p.deadline for p in self._pending.values() if p.deadline is not None]
        return min(deadlines) if deadlines else None

    def fail_all(self) -> list[PendingRequest]:
        """Remove and return every pending request, oldest first."""
        failed = list(self._pending.values())
        self._pending.clear()
        return failed

    def view(self) -> Mapping[int, PendingRequest]:
        """A read-only view by id (only ``int`` keys match)."""
        return ExactIdView(self._pending, is_our_id)
