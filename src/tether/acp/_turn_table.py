"""The turns of one agent connection: which are running, and each session's turn machine.

:class:`TurnTable` is shared by the connection's collaborators: the wire
(:mod:`tether.acp._wire`) fails running turns and tells the machines that the agent is
gone; the turn logic (:mod:`tether.acp._turns`) registers turns and drives the
machines; the agent's requests (:mod:`tether.acp._agent_requests`) find the turn a
request belongs to. It is the only owner of those fields.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tether.acp.turn_state import SessionTurns, TurnInput

UpdateListener = Callable[[dict[str, Any]], None]


@dataclass
class TurnResult:
    """How a prompt turn ended."""

    stop_reason: str
    result: dict[str, Any]
    permission_denied: int = 0
    # A cancel was sent during the turn: whether the agent ended it `cancelled` (False:
    # it answered otherwise, or ignored the cancel past ``cancel_grace`` and its
    # connection was retired); None: no cancel was sent.
    cancel_honoured: bool | None = None


@dataclass
class _Turn:
    session_id: str
    request_id: int
    listener: UpdateListener
    failed: asyncio.Future[BaseException]
    cancel_requested: bool = False
    cancel_sent_at: float | None = None  # monotonic; the first session/cancel of the turn
    poke: asyncio.Future[None] | None = None  # wakes the turn's wait (a cancel was sent)
    permission_denied: int = 0
    # agent->client permission requests of this turn still waiting for a decision
    pending_permissions: dict[Any, asyncio.Task[None]] = field(default_factory=dict)
    # what a cancelled pending request is answered, when not the permission `cancelled`
    cancel_answers: dict[Any, dict[str, Any]] = field(default_factory=dict)


class TurnTable:
    """Running turns by session, each session's :class:`SessionTurns`, and the signal
    that a late answer (to an abandoned request) arrived."""

    def __init__(self) -> None:
        self._running: dict[str, _Turn] = {}
        self._machines: dict[str, SessionTurns] = {}
        # Set when the core dropped a stale answer: a settling turn looks again.
        self.late_answer = asyncio.Event()

    def machine(self, session_id: str) -> SessionTurns:
        """The turn machine of ``session_id`` (made on first use)."""
        machine = self._machines.get(session_id)
        if machine is None:
            machine = self._machines[session_id] = SessionTurns(session_id)
        return machine

    def existing_machine(self, session_id: str) -> SessionTurns | None:
        """The turn machine of ``session_id``; None for a session never prompted."""
        return self._machines.get(session_id)

    def start(self, turn: _Turn) -> None:
        """Register ``turn`` as its session's running turn."""
        self._running[turn.session_id] = turn

    def end(self, session_id: str) -> None:
        """The turn of ``session_id`` is over (whatever its end)."""
        self._running.pop(session_id, None)

    def turn_of(self, session_id: object) -> _Turn | None:
        """The running turn of ``session_id``, if any."""
        return self._running.get(session_id) if isinstance(session_id, str) else None

    def running_turns(self) -> list[_Turn]:
        """Every running turn."""
        return list(self._running.values())

    def fail_running(self, exc: BaseException) -> None:
        """Fail every running turn with ``exc`` (each is then abandoned by its prompt)."""
        for turn in self._running.values():
            if not turn.failed.done():
                turn.failed.set_result(exc)

    def agent_gone(self) -> None:
        """The agent side is unusable: every machine goes ``RETIRED``."""
        for machine in self._machines.values():
            machine.transition(TurnInput.AGENT_GONE)
