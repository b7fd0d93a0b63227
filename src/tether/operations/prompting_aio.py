"""The asyncio flavour of :mod:`tether.operations.prompting`: submit a prompt and read
its turn on an :class:`~tether.ipc.aio_client.AsyncOwnerConnection`.

The same loop and the same caller-leaves rule as the blocking flavour (read them in
:mod:`.prompting`'s docstring): :func:`asubmit` sends the one ``prompt`` request and
returns an :class:`AsyncTurn`, whose :meth:`~AsyncTurn.frames` yields the turn's frames
-- the ack first, the owner's relayed frames, the rest from the journal when the owner
let go of the connection (as ``update`` frames), and the ``result`` frame last -- and
whose :meth:`~AsyncTurn.aclose` is the rule: a waited turn left before its end is
cancelled by its request id (bounded), then the connection is closed.

Blocking operations (the cancel, "does the same owner still serve?") run through the
turn's ``run`` (default ``asyncio.to_thread``): the library passes its own, which runs
them in the client's ``TETHER_HOME``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from tether import _aio
from tether.errors import OwnerLost, OwnerUnavailable, error_from_wire
from tether.ipc.aio_client import AsyncOwnerConnection
from tether.operations.prompting import (
    LEAVE_S,
    REQUEST_KIND,
    TurnEnd,
    cursor,
    journal_update,
    owner_kept_turn,
    rest_result,
)

__all__ = ["AsyncTurn", "asubmit"]

Run = Callable[..., Awaitable[Any]]


async def asubmit(
    conn: AsyncOwnerConnection,
    key: str,
    payload: dict[str, Any],
    *,
    deadline_ms: int | None = None,
    max_bytes: int | None = None,
    request_id: str | None = None,
    run: Run = asyncio.to_thread,
    rest_from_journal: bool = True,
) -> AsyncTurn:
    """Send the ``prompt`` request (:func:`~tether.operations.prompting.prompt_payload`)
    on ``conn`` for session ``key``; returns its turn, to read.

    Args:
        request_id: the request's id, when the caller must know it before it is sent
            (the ACP door marks the turn's journal entries as its own); else a new one.
        run: how the turn runs a blocking operation (see the module docstring).
        rest_from_journal: see :class:`AsyncTurn`.

    Raises:
        UsageError: the request is over ``max_bytes``; nothing was sent.
        OwnerUnavailable: the connection broke while sending (nothing was admitted).
    """
    try:
        rid = await conn.send(
            REQUEST_KIND, payload, deadline_ms, request_id=request_id, max_bytes=max_bytes
        )
    except ConnectionError:
        raise OwnerUnavailable("the owner went away before the request") from None
    waits = payload.get("wait") is not False
    return AsyncTurn(conn, key, rid, waits=waits, run=run, rest_from_journal=rest_from_journal)


class AsyncTurn:
    """One submitted turn, read to its end (see the module docstring).

    Attributes:
        ack: the owner's ack frame, once it came (``seq``: the turn's first entry).
        result: the turn's ``result`` payload, once it ended.
        error_frame: the owner's ``error`` frame that ended the request, if one did.
        let_go: the owner let go of the connection; the rest came from the journal (a
            caller that keeps connections must not keep this one).

    ``rest_from_journal=False`` is the one option: the loop then ends at a ``lagged``
    frame (yielded last) and lets ``OwnerLost`` propagate, for a caller that reads the
    rest of a turn from the journal itself anyway -- the gateway's wait route, which
    also answers for turns it submitted on the thread path, with no connection to read
    (:mod:`tether.serve.prompt_wait`).
    """

    def __init__(
        self,
        conn: AsyncOwnerConnection,
        key: str,
        request_id: str,
        *,
        waits: bool = True,
        run: Run = asyncio.to_thread,
        rest_from_journal: bool = True,
    ) -> None:
        self.conn = conn
        self.key = key
        self.request_id = request_id
        self.waits = waits
        self.ack: dict[str, Any] | None = None
        self.result: dict[str, Any] | None = None
        self.let_go = False
        self.error_frame: dict[str, Any] | None = None
        self._ended = False  # a terminal answer came (result or error)
        self._run = run
        self._journal = rest_from_journal
        self._seen = cursor(conn.hello)  # the journal seq of the last frame relayed to us

    async def frames(self) -> AsyncGenerator[dict[str, Any], None]:
        """The turn's frames, its ``result`` frame last (see the module docstring).

        Raises:
            TetherError subclasses: the turn's error (re-raised as its class);
            ``OwnerUnavailable`` before the ack; ``OwnerLost`` when its outcome is
            unknown.

        Cancellation (or the iterator closed early): a journal follower is stopped
        (bounded) before it propagates; the turn itself is left to :meth:`aclose`.
        """
        frames = self.conn.frames(self.request_id)
        while True:
            try:
                frame = await anext(frames)
            except StopAsyncIteration:
                raise OwnerLost("the owner ended the turn without an answer") from None
            except OwnerLost:
                if not self._journal:
                    raise
                # Cut off after the ack: a lagged frame lost with its buffer, or the
                # owner died. The journal knows which: the turn's end, if recorded.
                generation = self.conn.hello.get("generation")
                follow = await self._run(owner_kept_turn, self.key, generation)
                async for rest in self._rest(follow=follow):
                    yield rest
                return
            kind = frame.get("type")
            if kind == "update":
                seq = frame.get("seq")
                if isinstance(seq, int) and seq > self._seen:
                    self._seen = seq
            elif kind == "ack":
                self.ack = frame
            elif kind == "lagged" and self._journal:
                # We read too slowly and the owner let go of us; the turn goes on, and
                # its frames are all journaled: the rest of it comes from there.
                last = frame.get("lastSeq")
                self._seen = max(self._seen, last if isinstance(last, int) else 0)
                async for rest in self._rest(follow=True):
                    yield rest
                return
            elif kind == "lagged":  # rest_from_journal=False: the caller reads it
                self.let_go = True
                yield frame
                return
            elif kind == "error":
                self._ended = True
                self.error_frame = frame
                raise error_from_wire(frame.get("error") or {})
            elif kind == "result":
                self._ended = True
                result = frame.get("result")
                self.result = result if isinstance(result, dict) else {}
                yield frame
                return
            yield frame

    async def _rest(self, *, follow: bool) -> AsyncIterator[dict[str, Any]]:
        """The rest of the turn from the journal, as relayed frames, then its result."""
        from tether.operations.turn_rest import TurnRest

        self.let_go = True
        rest = TurnRest(self.key, self.request_id, self._seen, follow=follow)
        async for seq, acp in rest.frames():
            self._seen = seq
            yield journal_update(seq, "in", acp)
        try:
            self.result = rest_result(rest)  # or the turn's error, raised
        finally:
            self._ended = True
        yield {"type": "result", "requestId": self.request_id, "result": self.result}

    @property
    def end(self) -> TurnEnd | None:
        """How the turn ended (None until its result came)."""
        if self.result is None:
            return None
        return TurnEnd(self.request_id, self.result, self._seen, from_journal=self.let_go)

    @property
    def ended(self) -> bool:
        """Whether the turn's answer (its result or its error) came."""
        return self._ended

    async def aclose(self) -> None:
        """Let go of the turn: the caller-leaves rule (:mod:`.prompting`), then close.

        A waited turn that has not ended is cancelled by its request id (bounded by
        ``LEAVE_S``; a cancel that finds nothing, or fails, is no failure).

        Cancellation: not cut short; the cancel and the close finish (bounded) first.
        """
        if self.waits and not self._ended:
            await _aio.cleanup(self._cancel(), what="cancel the turn left")
        await _aio.cleanup(self.conn.aclose(), timeout=LEAVE_S, what="close")

    async def _cancel(self) -> None:
        from tether.operations.live import cancel

        async with asyncio.timeout(LEAVE_S):
            await self._run(cancel, self.key, self.request_id)
