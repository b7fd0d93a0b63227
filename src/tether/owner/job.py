"""One admitted request, and the connection its frames go to.

Every frame the owner sends to a caller goes through the caller's :class:`Outbox`: one
per connection, the one place where output to a caller is buffered. Frames are queued
and written once per event-loop pass -- an agent's stdout chunk often holds hundreds of
updates, and one write (one syscall) per update was the owner's largest cost when
streaming. A caller that left is *detached*: writes to it are dropped, never errors,
and the work goes on.

A :class:`Job` is one admitted request: its envelope, its outbox, when it was admitted,
and its one terminal frame (:meth:`Job.finish`; later calls are ignored).
"""

from __future__ import annotations

import asyncio
from typing import Any

from tether.errors import TetherError
from tether.ipc import protocol

__all__ = ["Job", "Outbox"]


class Outbox:
    """The owner's output to one connection, batched per event-loop pass."""

    __slots__ = ("_flush_scheduled", "_out", "detached", "writer")

    def __init__(self, writer: asyncio.StreamWriter | None) -> None:
        self.writer = writer
        self.detached = writer is None
        self._out: list[bytes] = []
        self._flush_scheduled = False

    def write(self, data: bytes) -> None:
        """Queue ``data``; it is written (in order) at the end of this loop pass."""
        if self.detached:
            return
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Write what is queued; a caller that left is detached, not an error."""
        self._flush_scheduled = False
        if not self._out:
            return
        data, self._out = b"".join(self._out), []
        if self.detached or self.writer is None:
            return
        try:
            self.writer.write(data)
        except (ConnectionError, RuntimeError):
            self.detach()

    def detach(self) -> None:
        """The caller left (``--no-wait``, or it died): drop its output from now on."""
        self.detached = True
        self._out = []

    async def drain(self, timeout: float) -> None:
        """Flush, then wait (bounded) until the kernel took the bytes."""
        self.flush()
        if self.writer is None or self.detached:
            return
        try:
            async with asyncio.timeout(timeout):
                await self.writer.drain()
        except (TimeoutError, ConnectionError, RuntimeError):
            self.detach()


class Job:
    """One admitted request and the connection its frames go to."""

    __slots__ = (
        "_prefix",
        "admitted_at",
        "cancel_requested",
        "done",
        "env",
        "outbox",
        "superseded",
    )

    def __init__(self, env: protocol.Envelope, outbox: Outbox, admitted_at: float) -> None:
        self.env = env
        self.outbox = outbox
        self.admitted_at = admitted_at
        self.done = False
        # A cancel that arrived before the turn reached the agent (it was still starting):
        # the turn is then never sent, rather than the cancel being lost.
        self.cancel_requested = False
        # The session is being closed under this request: its own outcome (a `cancelled`
        # turn) no longer counts. The owner answers it SESSION_CLOSED once the session's
        # end is recorded, so its caller sees `session_ended` first.
        self.superseded = False
        self._prefix = b""

    def __repr__(self) -> str:
        return f"Job({self.env.kind} {self.request_id}, done={self.done})"

    @property
    def request_id(self) -> str:
        return self.env.request_id

    @property
    def kind(self) -> str:
        return self.env.kind

    @property
    def waiting(self) -> bool:
        """The caller waits for this request's outcome (not a ``--no-wait`` prompt)."""
        return self.env.payload.get("wait") is not False

    @property
    def deadline(self) -> float | None:
        """Monotonic time by which the caller wants its answer, if it set one."""
        if self.env.deadline_ms is None:
            return None
        return self.admitted_at + self.env.deadline_ms / 1000

    def send(self, frame: dict[str, Any]) -> None:
        self.outbox.write(protocol.encode(frame))

    def ack(self, position: int = 0) -> None:
        self.send({"type": "ack", "requestId": self.request_id, "queuePosition": position})

    def update_line(self, direction: str, line: bytes) -> None:
        """Relay one ACP frame unchanged: its bytes are embedded, never re-encoded.

        The line is a JSON object the core has already decoded, so embedding it as the
        ``frame`` value keeps the IPC frame valid JSON.
        """
        if self.superseded:
            return  # the session is closing: the rest of this turn is nobody's business
        if not self._prefix:
            rid = protocol.encode({"r": self.request_id})[5:-2]  # the id, JSON-escaped
            self._prefix = b'{"type":"update","requestId":' + rid + b',"direction":"'
        self.outbox.write(b'%s%s","frame":%s}\n' % (self._prefix, direction.encode(), line))

    def finish(
        self, result: dict[str, Any] | None = None, error: TetherError | None = None
    ) -> None:
        """Send the one terminal frame; later calls (and calls once superseded) are ignored."""
        if self.done or self.superseded:
            return
        self.done = True
        if error is not None:
            self.send({"type": "error", "requestId": self.request_id, "error": error.to_wire()})
        else:
            self.send({"type": "result", "requestId": self.request_id, "result": result or {}})
        self.outbox.flush()

    def supersede(self) -> None:
        """Hold back this request's own outcome (see ``superseded``)."""
        if not self.done:
            self.superseded = True

    def finish_superseded(self, error: TetherError) -> None:
        """Answer a superseded request with ``error`` (its one terminal frame)."""
        self.superseded = False
        self.finish(error=error)
