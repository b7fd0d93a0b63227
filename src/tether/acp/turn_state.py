"""The turn lifecycle of one ACP session, as a transition table (no I/O).

Theory of operation
-------------------
An ACP session runs one turn at a time. Seen from the client, it is in one of five
states::

    IDLE --PROMPT_SENT--> RUNNING --CANCEL_SENT--> CANCELLING
     ^                     |   |                     |   |
     +------ANSWERED-------+   +-------GIVEN_UP------+   |   (GIVEN_UP from both)
     +------ANSWERED-----------------------------------+ |
     |                                                   v
     +------LATE_ANSWER------ ABANDONED <----------------+
                                 |
                           GRACE_EXPIRED
                                 v
                              RETIRED   <--AGENT_GONE-- (any state)

``RUNNING`` / ``CANCELLING``: a ``session/prompt`` is pending; its session's updates
belong to it. ``CANCELLING`` only records that ``session/cancel`` went out: the agent
must still answer the prompt (normally ``stopReason: "cancelled"``).

``ABANDONED``: we stopped waiting (the ceiling passed, the caller was cancelled, an
observer failed) and sent ``session/cancel``; the prompt was removed from the pending
table, so its late answer will be dropped. The agent may still stream updates of that
turn, and they carry only the session id -- so the one thing this state forbids is a
new prompt: ``(ABANDONED, PROMPT_SENT)`` is not in the table. The shell first waits
for the late answer (``LATE_ANSWER`` -> ``IDLE``) or gives up on the agent
(``GRACE_EXPIRED`` -> ``RETIRED``; the agent is restarted and the session resumed
elsewhere). This is seed 002's promise: no update of an abandoned turn ever reaches
another turn.

``RETIRED`` is terminal: the agent went away (EOF, exit, failed liveness check) or is
no longer trusted. A key that is not in the table *is* the error: a miss raises
:class:`~tether.errors.InvalidTransition` and leaves the machine ``RETIRED``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from tether._table import Table
from tether.errors import InvalidTransition

__all__ = ["LEGAL", "SessionTurns", "TurnInput", "TurnState"]


class TurnState(enum.Enum):
    """Where an ACP session's turn is."""

    IDLE = "idle"
    RUNNING = "running"
    CANCELLING = "cancelling"
    ABANDONED = "abandoned"
    RETIRED = "retired"


class TurnInput(enum.Enum):
    """What the driver tells the machine happened."""

    PROMPT_SENT = "prompt-sent"
    CANCEL_SENT = "cancel-sent"
    ANSWERED = "answered"
    GIVEN_UP = "given-up"
    LATE_ANSWER = "late-answer"
    GRACE_EXPIRED = "grace-expired"
    AGENT_GONE = "agent-gone"


_S = TurnState
_I = TurnInput

_TRANSITIONS: Final[Mapping[tuple[TurnState, TurnInput], TurnState]] = {
    (_S.IDLE, _I.PROMPT_SENT): _S.RUNNING,
    (_S.RUNNING, _I.CANCEL_SENT): _S.CANCELLING,
    # A second cancel sends nothing (the core emits session/cancel once per prompt).
    (_S.CANCELLING, _I.CANCEL_SENT): _S.CANCELLING,
    (_S.RUNNING, _I.ANSWERED): _S.IDLE,
    # stopReason "cancelled", or an answer that crossed our cancel (end_turn): both end it.
    (_S.CANCELLING, _I.ANSWERED): _S.IDLE,
    (_S.RUNNING, _I.GIVEN_UP): _S.ABANDONED,
    (_S.CANCELLING, _I.GIVEN_UP): _S.ABANDONED,
    (_S.ABANDONED, _I.LATE_ANSWER): _S.IDLE,
    (_S.ABANDONED, _I.GRACE_EXPIRED): _S.RETIRED,
    (_S.IDLE, _I.AGENT_GONE): _S.RETIRED,
    (_S.RUNNING, _I.AGENT_GONE): _S.RETIRED,
    (_S.CANCELLING, _I.AGENT_GONE): _S.RETIRED,
    (_S.ABANDONED, _I.AGENT_GONE): _S.RETIRED,
    (_S.RETIRED, _I.AGENT_GONE): _S.RETIRED,
}

#: Every (state, input) pair the table accepts; exported for tests and docs.
LEGAL: Final = frozenset(_TRANSITIONS)

_TABLE: Final = Table("turn", _TRANSITIONS, fail=_S.RETIRED)


class SessionTurns:
    """The sans-IO turn machine of one ACP session.

    ``request_id`` is the id of the prompt in flight (``RUNNING``, ``CANCELLING``) or
    of the abandoned one whose answer is awaited (``ABANDONED``); else None.
    """

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self._state = TurnState.IDLE
        self.request_id: int | None = None

    @property
    def state(self) -> TurnState:
        return self._state

    @property
    def in_flight(self) -> bool:
        """Whether a prompt is pending and its updates belong to it."""
        return self._state in (TurnState.RUNNING, TurnState.CANCELLING)

    def __repr__(self) -> str:
        return (
            f"SessionTurns(session_id={self.session_id!r}, state={self._state.name}, "
            f"request_id={self.request_id!r})"
        )

    def transition(self, event: TurnInput, request_id: int | None = None) -> TurnState:
        """Apply ``event`` (``request_id`` with ``PROMPT_SENT``); returns the new state.

        Raises:
            InvalidTransition: the table has no entry for (state, event); the machine is
                left ``RETIRED``.
        """
        try:
            new = _TABLE.next(self._state, event, session_id=self.session_id)
        except InvalidTransition:
            self._state = _TABLE.after_miss(self._state)
            raise
        self._state = new
        if event is TurnInput.PROMPT_SENT:
            self.request_id = request_id
        elif new in (TurnState.IDLE, TurnState.RETIRED):
            self.request_id = None
        return new
