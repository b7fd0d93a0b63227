"""Turns: ``session/prompt``, cancel, abandon, and what an abandoned turn leaves behind.

A turn is one ``session/prompt`` request and the ``session/update`` notifications of
its session until the answer. It ends in one of five ways:

* answered -- the agent's result (``end_turn``, ``cancelled`` after our
  ``session/cancel``, ...) or its JSON-RPC error;
* abandoned -- the ceiling passed, the caller was cancelled, or a listener/observer
  raised: its permission requests are answered ``cancelled``, ``session/cancel`` is
  sent once, and the request is removed from the pending table, so its late answer is
  dropped as stale;
* cancel ignored -- we sent ``session/cancel`` and the agent has not ended the turn
  within ``cancel_grace``: the turn is abandoned (below) and, the agent having had its
  grace already, settled at once -- unless its answer is in by now the connection is
  retired, exactly as when a next turn's :meth:`TurnMethods.settle` gives up; the turn
  returns ``cancelled`` with ``cancel_honoured`` False, and the owner restarts the
  agent and resumes the session;
* broken -- the agent exited (EOF, or a failed liveness check);
* refused before sending -- the connection is closed, broken or retired.

Abandoned turns (seed 002). A late *answer* is dropped by id, but the abandoned turn's
trailing ``session/update``\\ s carry only the session id: delivered during the next
turn they would be indistinguishable from its own. So the next turn of that session
first waits (:meth:`TurnMethods.settle`) until the agent has answered the abandoned
prompt; updates arriving meanwhile belong to no turn and go to the out-of-turn
listener. If the agent has not answered within ``abandoned_turn_grace``, the
connection is retired (``AgentUnresponsive``): it is never used for another turn, and
the owner restarts the agent and resumes the session. A mixin of
:class:`tether.acp.connection.AgentConnection`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether import _log
from tether.acp.turn_state import SessionTurns, TurnInput, TurnState
from tether.errors import AgentUnresponsive, BrokenResourceError, FrameTooLarge, PromptTimeout

if TYPE_CHECKING:
    from tether.acp._agent_requests import AgentRequests
    from tether.acp.connection import ClientOptions
    from tether.acp.transport import AgentTransport
    from tether.jsonrpc import JsonRpcConnection, Response

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


class TurnMethods:
    """Turn logic; see the module docstring."""

    options: ClientOptions
    rpc: JsonRpcConnection
    transport: AgentTransport
    _requests: AgentRequests
    _loop: asyncio.AbstractEventLoop
    _turns: dict[str, _Turn]
    _waiters: dict[int, asyncio.Future[Response]]
    _listeners: dict[str, UpdateListener]
    _turn_states: dict[str, SessionTurns]
    _late_answer: asyncio.Event
    _dead: BaseException | None
    _closed: bool

    # supplied by AgentConnection
    def _usable(self) -> bool:
        raise NotImplementedError

    def _check_usable(self) -> None:
        raise NotImplementedError

    def _send_request(self, method: str, params: Any) -> tuple[int, asyncio.Future[Response]]:
        raise NotImplementedError

    def _abandon(self, request_id: int, reason: str) -> None:
        raise NotImplementedError

    def _result_of(self, method: str, response: Response) -> Any:
        raise NotImplementedError

    def _fail_everything(self, exc: BaseException) -> None:
        raise NotImplementedError

    def _exit_error(self, why: str) -> BrokenResourceError:
        raise NotImplementedError

    def send_bytes(self, data: bytes) -> None:
        raise NotImplementedError

    def _machine(self, session_id: str) -> SessionTurns:
        machine = self._turn_states.get(session_id)
        if machine is None:
            machine = self._turn_states[session_id] = SessionTurns(session_id)
        return machine

    async def prompt(
        self,
        session_id: str,
        blocks: Sequence[dict[str, Any]],
        listener: UpdateListener,
        *,
        ceiling: float | None = None,
    ) -> TurnResult:
        """Run one turn: send ``session/prompt`` and stream its updates to ``listener``.

        Args:
            session_id: the ACP session.
            blocks: the prompt content blocks.
            listener: called synchronously, in arrival order, with every raw notification
                frame for this session during the turn.
            ceiling: the hard ceiling in seconds (default: the connection's
                ``prompt_ceiling``); None for none.

        Returns:
            The turn's stop reason and raw result.

        Raises:
            PromptTimeout: the ceiling passed; the request was abandoned
                (``session/cancel`` sent once, a late answer will be dropped).
            AgentUnresponsive: an earlier abandoned turn of this session was never
                answered within the grace; the connection is retired (nothing was sent).
            AgentExited: the agent died during the turn (noticed at once on EOF, or
                within one liveness interval).
            AgentRequestError: the agent answered with an error.
            Exception: what a listener or observer raised; the turn was abandoned.

        Cancellation: the request is abandoned (``session/cancel`` sent once, pending
        permission requests answered ``cancelled``) before the cancellation propagates;
        the connection stays usable for the next turn.
        """
        if session_id in self._turns:
            raise RuntimeError(f"a turn is already running in session {session_id}")
        ceiling = self.options.prompt_ceiling if ceiling is None else ceiling
        started = time.monotonic()
        if not await self.settle(session_id):
            self._check_usable()
        machine = self._machine(session_id)
        # Register the turn before sending, so observers see its request frame as part of it.
        turn = _Turn(session_id, -1, listener, self._loop.create_future())
        self._turns[session_id] = turn
        self._listeners[session_id] = listener
        try:
            turn.request_id, fut = self._send_request(
                "session/prompt", {"sessionId": session_id, "prompt": list(blocks)}
            )
            machine.transition(TurnInput.PROMPT_SENT, turn.request_id)
            response = await self._wait_turn(turn, fut, started, ceiling)
            if response is None:  # the agent ignored our cancel past the grace
                return TurnResult(
                    "cancelled", {"stopReason": "cancelled"}, turn.permission_denied, False
                )
            machine.transition(TurnInput.ANSWERED)
            if turn.failed.done():
                # Failed in the same read as its answer (an oversized frame, an observer
                # that broke): answered, so nothing to abandon, but it did not succeed.
                raise turn.failed.result()
        except BaseException:
            if machine.in_flight:
                self._give_up(turn, "cancelled")
            raise
        finally:
            self._turns.pop(session_id, None)
            self._listeners.pop(session_id, None)
            self._requests.cancel_permissions(turn)
        result = self._result_of("session/prompt", response)
        result = result if isinstance(result, dict) else {}
        stop_reason = str(result.get("stopReason") or "end_turn")
        return TurnResult(
            stop_reason=stop_reason,
            result=result,
            permission_denied=turn.permission_denied,
            cancel_honoured=stop_reason == "cancelled" if turn.cancel_sent_at else None,
        )

    async def _wait_turn(
        self, turn: _Turn, fut: asyncio.Future[Response], started: float, ceiling: float | None
    ) -> Response | None:
        """The turn's answer; None when the agent ignored our cancel past ``cancel_grace``
        (the turn is then given up and the connection retired, see :meth:`_cancel_ignored`)."""
        while True:
            wait = self.options.liveness_interval
            grace = self.options.cancel_grace
            if turn.cancel_sent_at is not None and grace is not None:
                left = turn.cancel_sent_at + grace - time.monotonic()
                if left <= 0 and not fut.done():
                    await self._cancel_ignored(turn, grace)
                    return None
                wait = min(wait, max(left, 0.0))
            if ceiling is not None:
                remaining = started + ceiling - time.monotonic()
                if remaining <= 0:
                    self._give_up(turn, "ceiling")
                    raise PromptTimeout(
                        f"the turn did not finish within {ceiling:g} s; it was cancelled",
                        session_id=turn.session_id,
                    )
                wait = min(wait, remaining)
            waiting: set[asyncio.Future[Any]] = {fut, turn.failed}
            if turn.cancel_sent_at is None:  # a cancel shortens the wait: it wakes us
                turn.poke = self._loop.create_future()
                waiting.add(turn.poke)
            done, _ = await asyncio.wait(waiting, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            if fut in done:
                return fut.result()
            if turn.poke in done:
                continue
            if turn.failed in done:
                self._give_up(turn, "observer failed")
                raise turn.failed.result()
            if not self.transport.is_alive():
                self._fail_everything(self._exit_error("liveness check failed"))

    async def _cancel_ignored(self, turn: _Turn, grace: float) -> None:
        """The agent did not end a cancelled turn within ``grace``: stop waiting for it.

        The turn is given up like any abandoned one (``$/cancel_request``, its late answer
        dropped) and, since the agent has already had the grace to answer, the abandoned
        turn is settled at once -- the same retirement as a next turn's :meth:`settle`
        after ``abandoned_turn_grace``: unless the answer is in by now, the connection is
        retired (``AgentUnresponsive``) and the owner restarts the agent and resumes the
        session.
        """
        _log.event("cancel_not_honoured", session_id=turn.session_id, rpcId=turn.request_id)
        self._give_up(turn, f"cancel not honoured within {grace:g} s")
        await self.settle(turn.session_id, grace=0)

    @staticmethod
    def _wake_turn(turn: _Turn) -> None:
        if turn.poke is not None and not turn.poke.done():
            turn.poke.set_result(None)

    def fail_turns_oversized(self, length: int) -> None:
        """The agent sent a line of at least ``length`` bytes, over the frame limit, and
        it was dropped: every running turn fails with ``FrameTooLarge`` (each is then
        abandoned) -- a turn whose output was cut must never end as a success."""
        limit = self.rpc.max_frame_bytes
        exc = FrameTooLarge(
            f"the agent sent a message of at least {length} bytes, over the limit of"
            f" {limit} bytes (config frameMaxBytes); it was dropped, so this turn's"
            " output is incomplete",
            limit=limit,
        )
        for turn in self._turns.values():
            if not turn.failed.done():
                turn.failed.set_result(exc)

    def _give_up(self, turn: _Turn, reason: str) -> None:
        """Abandon ``turn``: permissions answered ``cancelled``, ``session/cancel`` once,
        and the next turn of its session must first :meth:`settle`."""
        machine = self._machine(turn.session_id)
        if machine.in_flight:  # else the agent is gone (RETIRED): nothing to tell it
            machine.transition(TurnInput.GIVEN_UP)
            self._abandon(turn.request_id, reason)
        self._requests.cancel_permissions(turn)  # after session/cancel, as in cancel()
        self._waiters.pop(turn.request_id, None)

    async def settle(self, session_id: str, grace: float | None = None) -> bool:
        """Wait until nothing of an abandoned turn of ``session_id`` can still arrive.

        That is when the agent has answered the abandoned prompt (we sent it
        ``session/cancel``); updates arriving meanwhile belong to no turn and go to the
        out-of-turn listener. Returns True at once when no turn was abandoned.

        Args:
            grace: how long to wait (default: ``abandoned_turn_grace``).

        Returns:
            True if the session is ready for a turn; False if the connection is not
            usable -- closed, broken, or retired now because the agent did not answer
            within ``grace`` (it then raises ``AgentUnresponsive`` on every use).

        Cancellation: the wait stops; the abandoned turn stays pending.
        """
        machine = self._turn_states.get(session_id)
        grace = self.options.abandoned_turn_grace if grace is None else grace
        deadline = time.monotonic() + grace
        while machine is not None and machine.state is TurnState.ABANDONED:
            stale = machine.request_id
            if stale is not None and self.rpc.was_answered_late(stale):
                machine.transition(TurnInput.LATE_ANSWER)
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                _log.event("abandoned_turn_unanswered", session_id=session_id, request_id=stale)
                machine.transition(TurnInput.GRACE_EXPIRED)
                self._fail_everything(
                    AgentUnresponsive(
                        f"the agent did not answer an abandoned turn within {grace:g} s",
                        session_id=session_id,
                    )
                )
                break
            self._late_answer.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._late_answer.wait()
        return self._usable()

    def turn_state(self, session_id: str) -> TurnState:
        """Where the turn of ``session_id`` is (``IDLE`` for a session never prompted)."""
        machine = self._turn_states.get(session_id)
        return machine.state if machine is not None else TurnState.IDLE

    def has_abandoned_turn(self, session_id: str) -> bool:
        """Whether an abandoned turn of ``session_id`` is still unanswered."""
        machine = self._turn_states.get(session_id)
        return (
            machine is not None
            and machine.state is TurnState.ABANDONED
            and not (
                machine.request_id is not None and self.rpc.was_answered_late(machine.request_id)
            )
        )

    def cancel(self, session_id: str) -> bool:
        """Cancel the turn of ``session_id``: ``session/cancel`` once, permissions cancelled.

        Returns False if no turn is running. Never kills anything; the turn still ends
        with the agent's answer (normally stopReason ``cancelled``).
        """
        turn = self._turns.get(session_id)
        if turn is None:
            return False
        turn.cancel_requested = True
        machine = self._machine(session_id)
        if machine.in_flight:
            if turn.cancel_sent_at is None:  # the grace runs from the first cancel
                turn.cancel_sent_at = time.monotonic()
                self._wake_turn(turn)
            machine.transition(TurnInput.CANCEL_SENT)
            self.send_bytes(self.rpc.cancel_turn(turn.request_id))
        # Then (ACP's order) every pending permission request is answered `cancelled`:
        # an agent that heard the answer before the cancel could take it for a refusal
        # and end the turn `end_turn`.
        self._requests.cancel_permissions(turn)
        return True

    def active_turn(self, session_id: str) -> bool:
        return session_id in self._turns
