"""A library :class:`Session`: its turns, controls and journal, through its warm owner."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from tether import _aio, operations, sessions
from tether.client.connection import AsyncOwnerConnection
from tether.client.watch import watch_journal
from tether.errors import AlreadyAnswered, error_from_wire
from tether.events import (
    AgentMessageChunk,
    Event,
    Question,
    SessionEnded,
    TurnEnded,
    event_from_frame,
    question_from_frame,
)
from tether.journal.turn_rest import TurnRest

if TYPE_CHECKING:
    from tether.client import Client

__all__ = ["QuestionHandler", "Session"]


# Answers a question the agent asked: an answer word (``allow``, ``always``, ``deny``...,
# ``accept``/``decline``/``cancel``), a dict (an elicitation form accepted with this
# content), or None (leave it to other controllers, the deadline or the policy).
QuestionHandler = Callable[[Question], Awaitable["str | dict[str, Any] | None"]]


CANCEL_SETTLE_S = 3.0
R = TypeVar("R")


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

    async def _connect(self, deadline: float | None = None) -> AsyncOwnerConnection:
        return await self._client._connect_or_start(self.key, deadline)

    async def _op(self, fn: Callable[..., R], *args: Any) -> R:
        return await self._client._op(fn, *args)

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
        conn = await self._connect(deadline)
        deadline_ms = (
            None if deadline is None else max(1, int((deadline - time.monotonic()) * 1000))
        )
        handler = on_question or self._client.on_question
        controlling = control if control is not None else handler is not None
        rid = ""
        finished = False
        handlers: set[asyncio.Task[None]] = set()
        try:
            rid = await conn.send(
                "prompt",
                {
                    "prompt": blocks,
                    "wait": True,
                    "client": "library",
                    **({"control": True} if controlling else {}),
                    **(
                        {"permissionMode": self._client.permissions}
                        if self._client.permissions
                        else {}
                    ),
                },
                deadline_ms,
            )
            journaled = conn.hello.get("journalSeq")
            seen = journaled if isinstance(journaled, int) else 0  # see `lagged` below
            async for frame in conn.frames(rid):
                kind = frame.get("type")
                if kind == "update" and isinstance(seq := frame.get("seq"), int):
                    seen = max(seen, seq)
                if kind == "update" and frame.get("direction") == "in":
                    acp = frame.get("frame")
                    event = event_from_frame(acp) if isinstance(acp, dict) else None
                    if event is not None:
                        yield event
                elif kind == "lagged":
                    # We read too slowly and the owner let go of us; the turn goes on and
                    # its frames are all journaled: the rest of it comes from there.
                    last = frame.get("lastSeq")
                    rest = TurnRest(self.key, rid, max(seen, last or 0), follow=True)
                    async for _seq, acp in rest.frames():
                        if (event := event_from_frame(acp)) is not None:
                            yield event
                    stop_reason = rest.stop_reason()  # or the turn's error, raised
                    finished = True
                    yield TurnEnded(raw=frame, stop_reason=stop_reason)
                elif kind in ("interaction", "interaction_resolved"):
                    question = question_from_frame(frame, self._answerer)
                    if question is None:
                        continue
                    if handler is not None and isinstance(question, Question):
                        _aio.spawn(self._ask(handler, question), keep=handlers)
                    yield question
                elif kind == "session_ended":
                    ev = frame.get("event") or {}
                    yield SessionEnded(
                        raw=frame,
                        reason=str(ev.get("reason", "")),
                        terminated_by=str(ev.get("terminatedBy", "")),
                        message=str(ev.get("message", "")),
                        exit_code=ev.get("exitCode"),
                    )
                elif kind == "error":
                    finished = True
                    raise error_from_wire(frame.get("error") or {})
                elif kind == "result":
                    finished = True
                    result = frame.get("result") or {}
                    yield TurnEnded(
                        raw=frame,
                        stop_reason=str(result.get("stopReason", "")),
                        permission_denied=int(result.get("permissionDenied") or 0),
                    )
        finally:
            for task in list(handlers):
                task.cancel()
            if rid and not finished:
                # The consumer left early (cancelled, or broke out of the loop): cancel
                # this turn, never leave it running for nobody.
                await _aio.cleanup(self._cancel_request(rid), what="cancel")
            await asyncio.shield(conn.aclose())

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
        return await self._client._op(
            operations.answer, self.key, interaction_id, answer, content=content
        )

    async def _cancel_request(self, rid: str) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CANCEL_SETTLE_S):
                await self._op(operations.cancel, self.key, rid)

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
        conn = await self._connect()
        try:
            return await conn.request(kind, payload)
        finally:
            await conn.aclose()

    async def cancel(self) -> bool:
        """Cancel the running turn (the session stays warm). True if a turn was cancelled."""
        result = await self._op(operations.cancel, self.key)
        return bool(result.get("cancelled"))

    async def set_mode(self, mode_id: str) -> dict[str, Any]:
        return await self._control("set_mode", {"modeId": mode_id})

    async def set_config_option(self, config_id: str, value: str | bool) -> dict[str, Any]:
        return await self._control("set_config_option", {"configId": config_id, "value": value})

    async def status(self) -> dict[str, Any]:
        """The owner's status snapshot, or the registry's view when no owner runs."""
        return await self._op(operations.status, self.key)

    async def close(self, *, discard: bool = False) -> dict[str, Any]:
        """End the session: cancel the turn, tear the agent tree down, prove it gone.

        Args:
            discard: the agent also deletes the conversation (``session/delete``, where
                it offers it); the report's ``discarded`` says whether it did.

        Returns the owner's ``session_closed`` report (``survivors`` must be empty).
        """
        return await self._client._op(operations.close_session, self.key, discard=discard)

    async def fork(self, name: str) -> Session:
        """A new warm session continuing this one's conversation (``session/fork``).

        Its owner and agent start now. The parent is recorded as ``forkedFrom`` in the
        new session's record; ownership is the caller's, as for any session it creates.

        Raises:
            NotAdvertised: the agent does not offer ``session/fork``.
            UsageError: this session has no conversation yet, or ``name`` is taken.
        """
        key = sessions.session_key(self._scope, self.cwd, name)
        client = self._client
        await client._op(operations.fork_session, self.key, key, name=name, env=client.env or None)
        return Session(client, key, name, self.agent, self.cwd, self._scope)

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
        return await self._client._op(operations.history, self.key, limit=limit)

    async def read(self, *, tail: int | None = None) -> list[dict[str, Any]]:
        """The conversation: per turn its ``prompt``, the assistant's ``text``, its
        ``toolCalls`` and ``stopReason`` (the last ``tail`` turns when given)."""
        return await self._client._op(operations.transcript, self.key, tail=tail)

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
        return watch_journal(
            self._client._with_home, self.key, from_seq=from_seq, tail=tail, follow=follow
        )
