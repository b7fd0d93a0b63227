"""A library :class:`Session`: its turns, controls and journal, through its client's
backend (:mod:`tether.client.backend`): the local owners, or a remote Tether."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from tether import _aio
from tether.client.backend import SessionRef
from tether.errors import AlreadyAnswered
from tether.events import AgentMessageChunk, Event, Question, TurnEnded

if TYPE_CHECKING:
    from tether.client import Client

__all__ = ["QuestionHandler", "Session"]


# Answers a question the agent asked: an answer word (``allow``, ``always``, ``deny``...,
# ``accept``/``decline``/``cancel``), a dict (an elicitation form accepted with this
# content), or None (leave it to other controllers, the deadline or the policy).
QuestionHandler = Callable[[Question], Awaitable["str | dict[str, Any] | None"]]


class Session:
    """A saved session (agent, cwd, name) served by a warm owner. Get one from a Client."""

    def __init__(
        self, client: Client, key: str, name: str, agent: str, cwd: str, scope: str = ""
    ) -> None:
        self._client = client
        self.key = key
        self.name = name
        self.agent = agent
        self.cwd = cwd
        self._scope = scope  # the agent part of the session key (a fork shares it)

    def __repr__(self) -> str:
        return f"Session(agent={self.agent!r}, cwd={self.cwd!r}, name={self.name!r})"

    @property
    def _ref(self) -> SessionRef:
        return SessionRef(self.key, self.name, self.agent, self.cwd, self._scope)

    async def prompt(
        self,
        text: str | Sequence[dict[str, Any]],
        *,
        timeout: float | None = None,
        on_question: QuestionHandler | None = None,
        control: bool | None = None,
    ) -> AsyncIterator[Event]:
        """Run one turn; yield its events in arrival order, ending with :class:`TurnEnded`.

        Args:
            text: the prompt text, or a list of ACP content blocks.
            timeout: give up after this many seconds, counting from the call --
                reaching or starting the owner, the agent's start, queueing and the turn
                (the turn is cancelled, and :class:`tether.errors.PromptTimeout` or
                :class:`tether.errors.CallTimeout` is raised); None for no limit.
            on_question: answers the questions the agent asks during this turn
                (default: the client's ``on_question``); see :data:`QuestionHandler`.
                It runs as its own task; the first answer from any controller wins.
            control: be a controller of this turn: its questions are yielded as
                :class:`~tether.events.PermissionRequested` /
                :class:`~tether.events.ElicitationRequested` events (answer them with
                ``await event.answer("allow")``) and their ends as
                :class:`~tether.events.QuestionResolved`. Default: whether a handler is
                set. Without a controller, the session's policy decides at once.

        Raises:
            TetherError subclasses: PromptTimeout, AgentExited, QueueOverloaded,
            OwnerLost (the owner died mid-turn: outcome unknown), ...

        Cancellation: if the consuming task is cancelled (or the iterator is closed
        before the turn ended), the turn is cancelled in the owner -- ``session/cancel``,
        nothing killed, the session stays warm -- before the cancellation propagates.
        """
        blocks = [{"type": "text", "text": text}] if isinstance(text, str) else list(text)
        # The timeout bounds the whole call: reaching (or starting) the owner counts too.
        deadline = time.monotonic() + timeout if timeout is not None else None
        handler = on_question or self._client.on_question
        controlling = control if control is not None else handler is not None
        handlers: set[asyncio.Task[None]] = set()
        turn = self._client._backend.turn(
            self._ref, blocks, deadline=deadline, control=controlling, answerer=self._answerer
        )
        try:
            async for event in turn:
                if handler is not None and isinstance(event, Question):
                    _aio.spawn(self._ask(handler, event), keep=handlers)
                yield event
        finally:
            for task in list(handlers):
                task.cancel()
            # Closing the turn early (cancelled, or the loop left) cancels it: the
            # backend's side of this method's cancellation contract.
            await turn.aclose()

    async def _answerer(
        self, interaction_id: str, answer: str, content: dict[str, Any] | None
    ) -> dict[str, Any]:
        return await self.answer(interaction_id, answer, content=content)

    async def _ask(self, handler: QuestionHandler, question: Question) -> None:
        """Run the question handler; its answer loses quietly to an earlier one."""
        reply = await handler(question)
        if reply is None:
            return
        with contextlib.suppress(AlreadyAnswered):
            if isinstance(reply, dict):
                await question.answer("accept", reply)
            else:
                await question.answer(reply)

    async def answer(
        self, interaction_id: str, answer: str, *, content: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Answer a question the agent asked (:func:`tether.operations.answer`).

        Raises:
            AlreadyAnswered: someone answered first; this answer was not sent.
            UnknownInteraction: no such question is open in this session.
            UsageError: the answer names nothing the agent offered.
        """
        return await self._client._backend.answer(self.key, interaction_id, answer, content)

    async def run(self, text: str, *, timeout: float | None = None) -> tuple[str, str]:
        """Run one turn and return (assistant text, stop reason)."""
        parts: list[str] = []
        stop = ""
        async for event in self.prompt(text, timeout=timeout):
            if isinstance(event, AgentMessageChunk):
                parts.append(event.text)
            elif isinstance(event, TurnEnded):
                stop = event.stop_reason
        return "".join(parts), stop

    async def _control(self, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        return await self._client._backend.control(self.key, kind, payload)

    async def cancel(self) -> bool:
        """Cancel the running turn (the session stays warm). True if a turn was cancelled."""
        result = await self._client._backend.cancel(self.key)
        return bool(result.get("cancelled"))

    async def set_mode(self, mode_id: str) -> dict[str, Any]:
        return await self._control("set_mode", {"modeId": mode_id})

    async def set_config_option(self, config_id: str, value: str | bool) -> dict[str, Any]:
        return await self._control("set_config_option", {"configId": config_id, "value": value})

    async def status(self) -> dict[str, Any]:
        """The owner's status snapshot, or the registry's view when no owner runs."""
        return await self._client._backend.status(self.key)

    async def close(self, *, discard: bool = False) -> dict[str, Any]:
        """End the session: cancel the turn, tear the agent tree down, prove it gone.

        Args:
            discard: the agent also deletes the conversation (``session/delete``, where
                it offers it); the report's ``discarded`` says whether it did.

        Returns the owner's ``session_closed`` report (``survivors`` must be empty).
        """
        return await self._client._backend.close(self.key, discard=discard)

    async def fork(self, name: str) -> Session:
        """A new warm session continuing this one's conversation (``session/fork``).

        Its owner and agent start now. The parent is recorded as ``forkedFrom`` in the
        new session's record; ownership is the caller's, as for any session it creates.

        Raises:
            NotAdvertised: the agent does not offer ``session/fork``.
            UsageError: this session has no conversation yet, or ``name`` is taken.
        """
        return self._client._session(await self._client._backend.fork(self._ref, name))

    async def terminate(self) -> dict[str, Any]:
        """End the session now, for the operator: no new turn, no waiting on the agent.

        Unlike :meth:`close` the agent is not asked (no ``session/cancel`` grace, no
        ``session/close``): its tree gets TERM -> grace -> KILL through the keeper at
        once and is proven gone; the end is recorded (``session_ended``, reason
        ``terminated``) and every attached party is told. Idempotent: terminating an
        ended session changes nothing and reports how it ended (``alreadyEnded``).

        Returns:
            ``{terminated: True, reason, terminatedBy, alreadyEnded, ...}``.
        """
        return await self._client.terminate_session(self.key)

    async def history(self, *, limit: int | None = None) -> list[dict[str, Any]]:
        """One summary per turn, oldest first: ``requestId``, ``startedAt``,
        ``durationMs``, ``stopReason``, ``preview``, ``by`` (who prompted). Needs no owner."""
        return await self._client._backend.history(self.key, limit)

    async def read(self, *, tail: int | None = None) -> list[dict[str, Any]]:
        """The conversation: per turn its ``prompt``, the assistant's ``text``, its
        ``toolCalls`` and ``stopReason`` (the last ``tail`` turns when given)."""
        return await self._client._backend.transcript(self.key, tail)

    def watch(
        self, *, from_seq: int | None = None, tail: int | None = None, follow: bool = True
    ) -> AsyncIterator[Event]:
        """The session's journal as typed events, each with its ``seq``.

        Args:
            from_seq: start at this entry (replay, then live).
            tail: start this many entries before the end.
            follow: keep following live entries (across owner restarts) until the
                session ends; False stops at the last stored entry.
            With neither ``from_seq`` nor ``tail``: live entries only.

        Watching starts no owner and no agent. Leaving the loop stops the watch. A
        :class:`~tether.events.SessionEnded` event is the last one of a session.
        """
        return self._client._backend.watch(self.key, from_seq=from_seq, tail=tail, follow=follow)
