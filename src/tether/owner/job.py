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
import contextlib
from collections.abc import Callable
from typing import Any

from tether.errors import TetherError
from tether.ipc import protocol

__all__ = ["DEFAULT_OUTPUT_LIMIT", "Job", "Outbox"]

# Unsent bytes one connection may hold before it counts as lagging (prompters and
# watchers alike): a peer that never reads must not make the owner buffer without bound.
DEFAULT_OUTPUT_LIMIT = 8 * 1024 * 1024
CUT_OFF_S = 5.0  # a lagged peer that still does not read is disconnected after this

# Called when the connection lags; returns the terminal frame for its request, or None.
LagHandler = Callable[[], "bytes | None"]


def peer_credentials(writer: asyncio.StreamWriter | None) -> dict[str, int]:
    """The connected process's pid and uid, as the kernel says (``SO_PEERCRED``)."""
    if writer is None:
        return {}
    sock = writer.get_extra_info("socket")
    if sock is None:
        return {}
    import socket
    import struct

    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return {}
    pid, uid, _gid = struct.unpack("3i", raw)
    return {"pid": pid, "uid": uid}


def _cut_off(transport: asyncio.WriteTransport) -> None:
    """Drop a lagged peer that still holds unread bytes. One that read them all is
    already gone: aborting its closed transport again would raise in the loop."""
    if transport.get_write_buffer_size():
        transport.abort()


class Outbox:
    """The owner's output to one connection, batched per event-loop pass, and bounded.

    When the bytes the kernel has not taken yet pass ``limit`` (plus the size of the
    largest single frame over ``limit`` since the peer last caught up) the connection
    *lags*:
    each request on it is ended with a terminal ``lagged`` frame (its ``lag_handlers``
    say which), the connection is closed, and nothing more is queued for it. The work
    goes on; the peer resumes from the journal.
    """

    __slots__ = (
        "_flush_scheduled",
        "_out",
        "_room",
        "detached",
        "lag_handlers",
        "lagged",
        "limit",
        "peer",
        "writer",
    )

    def __init__(
        self, writer: asyncio.StreamWriter | None, *, limit: int = DEFAULT_OUTPUT_LIMIT
    ) -> None:
        self.writer = writer
        self.detached = writer is None
        self.limit = limit
        self.lagged = False
        self.lag_handlers: list[LagHandler] = []
        self.peer: dict[str, int] = peer_credentials(writer)
        self._out: list[bytes] = []
        self._room = 0  # see flush
        self._flush_scheduled = False

    def write(self, data: bytes) -> None:
        """Queue ``data``; it is written (in order) at the end of this loop pass."""
        if self.detached:
            return
        self._out.append(data)
        if len(data) > self.limit and data.count(b"\n") == 1:
            # One frame larger than the bound (an agent message of tens of MiB) is not
            # lag: the peer may hold that much more until it has caught up again.
            self._room = max(self._room, len(data))
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
            return
        if not self.limit:
            return
        unsent = self.writer.transport.get_write_buffer_size()
        if unsent <= self.limit:
            self._room = 0
        elif unsent > self.limit + self._room:
            self._lag()

    def _lag(self) -> None:
        """End every request on this connection with its ``lagged`` frame; let go of it."""
        self.lagged = True
        frames = [frame for handler in self.lag_handlers if (frame := handler()) is not None]
        self.detach()
        if self.writer is None:
            return
        transport = self.writer.transport
        with contextlib.suppress(Exception):
            for frame in frames:
                transport.write(frame)
            transport.close()  # after the buffered bytes, if the peer ever reads them
            asyncio.get_running_loop().call_later(CUT_OFF_S, _cut_off, transport)

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
        "_held",
        "_prefix",
        "admitted_at",
        "cancel_outcome",
        "cancel_requested",
        "done",
        "env",
        "lagged",
        "last_seq",
        "outbox",
        "state_error",
        "state_error_code",
        "superseded",
        "wants_updates",
    )

    def __init__(self, env: protocol.Envelope, outbox: Outbox, admitted_at: float) -> None:
        self.env = env
        self.outbox = outbox
        self.admitted_at = admitted_at
        self.done = False
        # A cancel that arrived before the turn reached the agent (it was still starting):
        # the turn is then never sent, rather than the cancel being lost.
        self.cancel_requested = False
        # A prompt cancelled while it ran: whether the agent honoured the cancel
        # ({"honoured", "agentRetired"}); what a waiting `cancel` is answered.
        self.cancel_outcome: dict[str, Any] | None = None
        # The session is being closed under this request: its own outcome (a `cancelled`
        # turn) no longer counts. The owner answers it SESSION_CLOSED once the session's
        # end is recorded, so its caller sees `session_ended` first.
        self.superseded = False
        self._prefix = b""
        # The terminal frame kept back until its turn's end is stored (``hold_answer``).
        self._held: list[bytes] | None = None
        self.last_seq = 0  # the journal seq of the last entry relayed to this caller
        self.lagged = False  # ended with `lagged`: the caller did not leave, it fell behind
        self.state_error: str | None = None  # the state database refused a write for it
        self.state_error_code: str | None = None  # its detail code (STATE_FULL...)
        # ``"updates": false``: the caller reads the turn from the journal (see ipc.protocol)
        self.wants_updates = env.payload.get("updates") is not False

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

    def ack(self, position: int = 0, seq: int = 0) -> None:
        """Admitted at ``position``; ``seq`` (if known) is its first journal entry's."""
        frame: dict[str, Any] = {
            "type": "ack",
            "requestId": self.request_id,
            "queuePosition": position,
        }
        if seq > 0:
            frame["seq"] = seq
        self.send(frame)

    def update_line(self, direction: str, line: bytes, seq: int = 0) -> None:
        """Relay one ACP frame unchanged: its bytes are embedded, never re-encoded.

        The line is a JSON object the core has already decoded, so embedding it as the
        ``frame`` value keeps the IPC frame valid JSON. ``seq`` is its journal entry's.
        """
        if self.superseded or not self.wants_updates:
            # The session is closing: the rest of this turn is nobody's business. Or the
            # caller asked for none of it (it follows the journal).
            return
        if not self._prefix:
            rid = protocol.encode({"r": self.request_id})[5:-2]  # the id, JSON-escaped
            self._prefix = b'{"type":"update","requestId":' + rid + b',"seq":'
            self.outbox.lag_handlers.append(self._on_lagged)
        self.last_seq = seq
        self.outbox.write(
            b'%s%d,"direction":"%s","frame":%s}\n' % (self._prefix, seq, direction.encode(), line)
        )

    def _on_lagged(self) -> bytes | None:
        if self._held:  # the answer waited for its record: it goes with the connection
            frames, self._held = self._held, None
            return b"".join(frames)
        if self.done:
            return None
        self.done = self.lagged = True
        return protocol.encode(
            {"type": "lagged", "requestId": self.request_id, "lastSeq": self.last_seq}
        )

    def finish(
        self, result: dict[str, Any] | None = None, error: TetherError | None = None
    ) -> None:
        """Send the one terminal frame; later calls (and calls once superseded) are ignored."""
        if self.done or self.superseded:
            return
        self.done = True
        if error is not None:
            frame = {"type": "error", "requestId": self.request_id, "error": error.to_wire()}
        else:
            frame = {"type": "result", "requestId": self.request_id, "result": result or {}}
        if self._held is not None:
            self._held.append(protocol.encode(frame))
            return
        self.send(frame)
        self.outbox.flush()

    def hold_answer(self) -> None:
        """Keep the terminal frame back until :meth:`release_answer` (a turn's caller is
        answered once the turn's end is stored: :mod:`tether.state.journal.stored_waits`)."""
        self._held = []

    def release_answer(self) -> None:
        """Send the kept terminal frame, if there is one; later ones go at once."""
        held, self._held = self._held, None
        if held:
            for data in held:
                self.outbox.write(data)
            self.outbox.flush()

    def supersede(self) -> None:
        """Hold back this request's own outcome (see ``superseded``)."""
        if not self.done:
            self.superseded = True

    def finish_superseded(self, error: TetherError) -> None:
        """Answer a superseded request with ``error`` (its one terminal frame)."""
        self.superseded = False
        self.finish(error=error)
