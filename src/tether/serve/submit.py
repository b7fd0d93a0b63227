"""Submitting a prompt from the event loop: the warm path of ``POST …/prompt``.

The operations layer's ``connect_or_start`` is blocking (it may start an owner, fence a
silent one, wait for a lock), so the gateway runs it in a worker thread. But the common
case -- the operator's gateway, a live owner that says hello at once -- needs none of
that: connect, read the hello, send the request, read the ack. Done here, on the loop,
it costs no thread hop and holds no worker thread while the owner admits the prompt,
so a hundred prompts at once queue for nothing in the gateway.

The connection is then kept for ``KEEP_S`` (an owner serves any number of requests on
one connection): the next prompt of a conversation skips the connect and the hello. It
is short on purpose -- while a connection is open the owner does not retire on its idle
TTL -- and a kept connection the owner has dropped (its own idle timeout, a restart) is
retried once on a fresh one: without an ack nothing was admitted.

With a ``turn`` (:class:`TurnReader`: the ``?wait=true`` route, :mod:`.prompt_wait`) the
connection is read past the ack to the request's terminal frame, each frame handed to
the reader; the connection is kept only once that frame has come.

The request and its frames are the operations layer's (:func:`tether.operations.asubmit`,
the one ``prompt`` request and loop); what is the gateway's own is the connection
(reached from the loop, kept) and the ack's answer.

Anything else returns None before the request is sent, and the caller takes the
thread path, which handles every case (and raises the proper error): a caller that
may be inside an agent tree (its visibility needs the proof), no owner or one that is
stopping or slow to greet, a request over the size limit. Once the request is sent,
the outcome is the owner's: its ack, its error, or ``OwnerUnavailable`` if it went away
first (nothing was admitted: safe to retry).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from tether import operations, sessions
from tether.errors import OwnerShuttingDown, OwnerUnavailable, TetherError, UsageError
from tether.ipc import protocol
from tether.ipc.aio_client import AsyncOwnerConnection
from tether.ipc.lines import LineReader
from tether.policy import access
from tether.serve import lookups
from tether.serve.stream import Hubs

HELLO_S = 1.0  # slower than this, the thread path decides (it may fence the owner)
KEEP_S = 1.0  # how long an owner connection waits for the session's next prompt


class TurnReader(Protocol):
    """What reads a turn past its ack on the owner connection (see the module docstring)."""

    def admitted(self, ack: dict[str, Any]) -> None:
        """The owner admitted the prompt (the same answer a 202 gives)."""

    def frame(self, frame: dict[str, Any]) -> None:
        """One frame of the request after its ack, its terminal frame last."""


class Prompter:
    """Prompts to live owners from the event loop, over briefly kept connections."""

    def __init__(self, hubs: Hubs) -> None:
        self.hubs = hubs
        self.kept: dict[str, tuple[AsyncOwnerConnection, asyncio.TimerHandle]] = {}

    async def prompt(
        self,
        key: str,
        payload: dict[str, Any],
        deadline_ms: int | None,
        max_bytes: int,
        turn: TurnReader | None = None,
    ) -> dict[str, Any] | None:
        """The owner's admission of the prompt, or None: take the thread path.

        With ``turn``, returns once the request's terminal frame has been handed to it.

        Raises:
            OwnerLost: (with ``turn``) the owner went away after admitting it.
        """
        if access.could_be_agent():
            return None
        kept = self.kept.pop(key, None)
        if kept is not None:
            kept[1].cancel()
            try:
                return await self._submit(kept[0], key, payload, deadline_ms, max_bytes, turn)
            except (OwnerUnavailable, OwnerShuttingDown):
                pass  # dropped or stopping since: not admitted, so ask afresh
        conn = await _connect(key)
        if conn is None:
            return None
        return await self._submit(conn, key, payload, deadline_ms, max_bytes, turn)

    async def _submit(
        self,
        conn: AsyncOwnerConnection,
        key: str,
        payload: dict[str, Any],
        deadline_ms: int | None,
        max_bytes: int,
        turn: TurnReader | None,
    ) -> dict[str, Any] | None:
        keep = False
        sent: operations.AsyncTurn | None = None
        ack: dict[str, Any] | None = None
        try:
            # A cursor before the prompt: the ack names its first entry (owners since issue
            # 23); the hello's journalSeq, read before the request was sent, also precedes it.
            said = conn.hello.get("journalSeq")
            from_seq = said + 1 if isinstance(said, int) else await _from_seq(self.hubs, key)
            try:
                sent = await operations.asubmit(
                    conn,
                    key,
                    payload,
                    deadline_ms=deadline_ms,
                    max_bytes=max_bytes,
                    rest_from_journal=False,  # the wait route reads it (prompt_wait)
                )
            except UsageError:
                return None  # too large: the thread path says so, in the one wording
            async for frame in sent.frames():
                if ack is not None:
                    assert turn is not None
                    turn.frame(frame)  # its terminal frame is the last: frames() ends
                    continue
                if frame.get("type") == "ack":
                    seq = frame.get("seq")
                    ack = {
                        "requestId": sent.request_id,
                        "sessionKey": key,
                        "queuePosition": frame.get("queuePosition"),
                        "fromSeq": seq if isinstance(seq, int) and seq > 0 else from_seq,
                    }
                    if turn is None:
                        keep = True
                        return ack
                    turn.admitted(ack)
            if ack is None:  # pragma: no cover - frames() raises first
                raise OwnerUnavailable("the owner ended the request before acknowledging it")
            # The terminal frame came: the connection is clean for the next prompt -- unless
            # it was `lagged`, after which the owner lets go of the connection.
            keep = not sent.let_go
            return ack
        except TetherError:
            if ack is None or turn is None or sent is None or sent.error_frame is None:
                raise
            # The turn's own error after the ack: its terminal frame, for the reader; the
            # request ended cleanly, so the connection is kept.
            turn.frame(sent.error_frame)
            keep = True
            return ack
        finally:
            if keep:
                self._keep(key, conn)
            else:
                await conn.aclose()

    def _keep(self, key: str, conn: AsyncOwnerConnection) -> None:
        if key in self.kept:  # two prompts at once: one connection is enough
            conn.writer.close()
            return
        loop = asyncio.get_running_loop()
        self.kept[key] = (conn, loop.call_later(KEEP_S, self._drop, key, conn))

    def _drop(self, key: str, conn: AsyncOwnerConnection) -> None:
        if self.kept.get(key, (None,))[0] is conn:
            del self.kept[key]
        conn.writer.close()

    def close_all(self) -> None:
        for conn, timer in self.kept.values():
            timer.cancel()
            conn.writer.close()
        self.kept.clear()


async def _connect(key: str) -> AsyncOwnerConnection | None:
    """A connection to the session's serving owner, its hello read; None if not at once."""
    conn: AsyncOwnerConnection | None = None
    try:
        async with asyncio.timeout(HELLO_S):
            reader, writer = await asyncio.open_unix_connection(sessions.socket_path(key))
            conn = AsyncOwnerConnection(reader, writer, LineReader(), {})
            hello = await conn.read()
    except (OSError, TimeoutError, TetherError):
        if conn is not None:
            await conn.aclose()
        return None
    if (
        hello is None
        or hello.get("type") != "hello"
        or hello.get("v") != protocol.VERSION
        or hello.get("stopping")
    ):
        await conn.aclose()
        return None
    conn.hello = hello
    conn.lines.max_bytes = protocol.caller_line_bound(hello, conn.lines.max_bytes)
    return conn


async def _from_seq(hubs: Hubs, key: str) -> int:
    """A cursor before every entry of a prompt not yet sent.

    A hub following the session has received every entry up to ``next_seq - 1``, some
    maybe a moment before they are stored: all of them precede the prompt's. Without
    one, the last stored seq (which the owner may already have passed with entries not
    yet committed: a stream from there shows them too).
    """
    hub = hubs.warm(key)
    if hub is not None:
        return hub.next_seq
    return await asyncio.to_thread(lookups.last_seq, key) + 1
