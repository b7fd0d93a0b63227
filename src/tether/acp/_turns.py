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
  retired, exactly as when a next turn's :meth:`Turns.settle` gives up; the turn
  returns ``cancelled`` with ``cancel_honoured`` False, and the owner restarts the
  agent and resumes the session;
* broken -- the agent exited (EOF, or a failed liveness check);
* refused before sending -- the connection is closed, broken or retired.

Abandoned turns (seed 002). A late *answer* is dropped by id, but the abandoned turn's
trailing ``session/update``\\ s carry only the session id: delivered during the next
turn they would be indistinguishable from its own. So the next turn of that session
first waits (:meth:`Turns.settle`) until the agent has answered the abandoned
prompt; updates arriving meanwhile belong to no turn and go to the out-of-turn
listener. If the agent has not answered within ``abandoned_turn_grace``, the
connection is retired (``AgentUnresponsive``): it is never used for another turn, and
the owner restarts the agent and resumes the session.

:class:`Turns` is a collaborator of :class:`tether.acp.connection.AgentConnection`: it
sends and waits through the connection's wire (:mod:`tether.acp._wire`), registers
turns and drives each session's machine in the turn table
(:mod:`tether.acp._turn_table`), and owns no field of either.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tether import _log
from tether.acp._turn_table import TurnResult, TurnTable, UpdateListener, _Turn
from tether.acp.turn_state import TurnInput, TurnState
from tether.errors import AgentUnresponsive, PromptTimeout

if TYPE_CHECKING:
    from tether.acp._agent_requests import AgentRequests
    from tether.acp._wire import Wire
    from tether.acp.connection import ClientOptions
    from tether.jsonrpc import Response

__all__ = ["TurnResult", "Turns", "UpdateListener"]


class Turns:
    """Turn logic of one connection; see the module docstring."""

    def __init__(
        self, wire: Wire, table: TurnTable, requests: AgentRequests, options: ClientOptions
    ) -> None:
        self._wire = wire
        self._table = table
        self._requests = requests
        self._options = options

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
        if self._table.turn_of(session_id) is not None:
            raise RuntimeError(f"a turn is already running in session {session_id}")
        ceiling = self._options.prompt_ceiling if ceiling is None else ceiling
        started = time.monotonic()
        if not await self.settle(session_id):
            self._wire.check_usable()
        machine = self._table.machine(session_id)
        # Register the turn before sending, so observers see its request frame as part of it.
        turn = _Turn(session_id, -1, listener, self._wire.loop.create_future())
        self._table.start(turn)
        self._wire.listen(session_id, listener)
        try:
            turn.request_id, fut = self._wire.send_request(
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
            self._table.end(session_id)
            self._wire.unlisten(session_id)
            self._requests.cancel_permissions(turn)
        result = self._wire.result_of("session/prompt", response)
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
            wait = self._options.liveness_interval
            grace = self._options.cancel_grace
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
                turn.poke = self._wire.loop.create_future()
                waiting.add(turn.poke)
            done, _ = await asyncio.wait(waiting, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            if fut in done:
                return fut.result()
            if turn.poke in done:
                continue
            if turn.failed in done:
                self._give_up(turn, "observer failed")
                raise turn.failed.result()
            if not self._wire.transport.is_alive():
                self._wire.fail_everything(self._wire.exit_error("liveness check failed"))

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

    def _give_up(self, turn: _Turn, reason: str) -> None:
        """Abandon ``turn``: permissions answered ``cancelled``, ``session/cancel`` once,
        and the next turn of its session must first :meth:`settle`."""
        machine = self._table.machine(turn.session_id)
        if machine.in_flight:  # else the agent is gone (RETIRED): nothing to tell it
            machine.transition(TurnInput.GIVEN_UP)
            self._wire.abandon(turn.request_id, reason)
        self._requests.cancel_permissions(turn)  # after session/cancel, as in cancel()
        self._wire.forget(turn.request_id)

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
        machine = self._table.existing_machine(session_id)
        grace = self._options.abandoned_turn_grace if grace is None else grace
        deadline = time.monotonic() + grace
        while machine is not None and machine.state is TurnState.ABANDONED:
            stale = machine.request_id
            if stale is not None and self._wire.rpc.was_answered_late(stale):
                machine.transition(TurnInput.LATE_ANSWER)
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                _log.event("abandoned_turn_unanswered", session_id=session_id, request_id=stale)
                machine.transition(TurnInput.GRACE_EXPIRED)
                self._wire.fail_everything(
                    AgentUnresponsive(
                        f"the agent did not answer an abandoned turn within {grace:g} s",
                        session_id=session_id,
                    )
                )
                break
            self._table.late_answer.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._table.late_answer.wait()
        return self._wire.usable()

    def turn_state(self, session_id: str) -> TurnState:
        """Where the turn of ``session_id`` is (``IDLE`` for a session never prompted)."""
        machine = self._table.existing_machine(session_id)
        return machine.state if machine is not None else TurnState.IDLE

    def has_abandoned_turn(self, session_id: str) -> bool:
        """Whether an abandoned turn of ``session_id`` is still unanswered."""
        machine = self._table.existing_machine(session_id)
        if machine is None or machine.state is not TurnState.ABANDONED:
            return False
        stale = machine.request_id
        return not (stale is not None and self._wire.rpc.was_answered_late(stale))

    def cancel(self, session_id: str) -> bool:
        """Cancel the turn of ``session_id``: ``session/cancel`` once, permissions cancelled.

        Returns False if no turn is running. Never kills anything; the turn still ends
        with the agent's answer (normally stopReason ``cancelled``).
        """
        turn = self._table.turn_of(session_id)
        if turn is None:
            return False
        turn.cancel_requested = True
        machine = self._table.machine(session_id)
        if machine.in_flight:
            if turn.cancel_sent_at is None:  # the grace runs from the first cancel
                turn.cancel_sent_at = time.monotonic()
                self._wake_turn(turn)
            machine.transition(TurnInput.CANCEL_SENT)
            self._wire.send_bytes(self._wire.rpc.cancel_turn(turn.request_id))
        # Then (ACP's order) every pending permission request is answered `cancelled`:
        # an agent that heard the answer before the cancel could take it for a refusal
        # and end the turn `end_turn`.
        self._requests.cancel_permissions(turn)
        return True

    def active_turn(self, session_id: str) -> bool:
        return self._table.turn_of(session_id) is not None
