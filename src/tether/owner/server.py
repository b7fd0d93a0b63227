"""The owner's IPC server: one coroutine per caller connection.

Each connection gets the owner's ``hello`` first, then its bytes go through the one
bounded line reader (:class:`tether.ipc.lines.LineReader`) and each line through the
strict request parser (:func:`tether.ipc.protocol.parse_request`). A valid request is
handed to admission (the owner decides what to do with it); an invalid one is answered
with an ``error`` frame and the connection keeps serving. A line over the frame limit is
answered, and then the connection is dropped: the rest of that line cannot be told from
the next frame.

Everything written to a caller goes through its :class:`~tether.owner.job.Outbox`, so
frames stay in order whoever produces them (a request's own frames, a broadcast
``session_ended``, a rejection).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from tether import _aio, _log
from tether.errors import FrameTooLarge
from tether.ipc import protocol
from tether.ipc.lines import LineReader
from tether.owner.job import Outbox

__all__ = ["IpcServer"]

READ_CHUNK = 65536
DRAIN_TIMEOUT_S = 1.0
# A caller sends its request right after our hello (the CLI and the library do so within
# milliseconds); one that is silent this long with nothing in flight is dropped.
IDLE_TIMEOUT_S = 5.0  # how long a last frame may take to reach a caller before we drop it

Admit = Callable[[protocol.Envelope, Outbox], None]


class IpcServer:
    """Serves IPC v2 connections; knows nothing about what requests do.

    Args:
        max_frame_bytes: the longest request line accepted.
        hello: builds the ``hello`` frame for a new connection.
        admit: called with each valid request and its connection's outbox.
        on_disconnect: called once when a connection ends (after its outbox is detached).
        waiting: whether a connection waits for a request in flight; one that does not
            and stays silent for ``idle_timeout`` seconds is dropped, so only waiting
            callers hold an owner open.
        idle_timeout: see ``waiting``.
    """

    def __init__(
        self,
        *,
        max_frame_bytes: int,
        hello: Callable[[], dict[str, Any]],
        admit: Admit,
        on_disconnect: Callable[[Outbox], None],
        waiting: Callable[[Outbox], bool],
        idle_timeout: float = IDLE_TIMEOUT_S,
    ) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._hello = hello
        self._admit = admit
        self._on_disconnect = on_disconnect
        self._waiting = waiting
        self.idle_timeout = idle_timeout
        self.connections: set[Outbox] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection until the caller closes it (or breaks the framing)."""
        outbox = Outbox(writer)
        self.connections.add(outbox)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        lines = LineReader(self.max_frame_bytes, what="request frame")
        try:
            outbox.write(protocol.encode(self._hello()))
            while not lines.at_eof:
                try:
                    async with asyncio.timeout(self.idle_timeout):
                        chunk = await reader.read(READ_CHUNK)
                except TimeoutError:
                    if self._waiting(outbox):
                        continue
                    # Silent, with nothing in flight that it waits for: it cannot pin us.
                    _log.event("ipc_idle_dropped", idle_s=self.idle_timeout)
                    break
                except ConnectionError:
                    break
                lines.feed(chunk)
                try:
                    self._handle_lines(lines, outbox)
                except FrameTooLarge as exc:
                    self._reject(outbox, None, "QUEUE_REQUEST_TOO_LARGE", exc.message)
                    await outbox.drain(DRAIN_TIMEOUT_S)
                    break
                await outbox.drain(DRAIN_TIMEOUT_S)
        finally:
            if task is not None:
                self._tasks.discard(task)
            self.connections.discard(outbox)
            outbox.flush()
            outbox.detach()
            try:
                writer.close()
            except RuntimeError:  # the loop is closing: nothing left to close it with
                pass
            self._on_disconnect(outbox)

    def _handle_lines(self, lines: LineReader, outbox: Outbox) -> None:
        while (line := lines.next_line()) is not None:
            if not line.strip():
                continue
            try:
                env = protocol.parse_request(line, max_frame_bytes=self.max_frame_bytes)
            except protocol.IpcRejected as exc:
                self._reject(outbox, exc.request_id, exc.detail_code, exc.message)
                continue
            self._admit(env, outbox)

    @staticmethod
    def _reject(outbox: Outbox, request_id: str | None, detail: str, message: str) -> None:
        err = protocol.IpcRejected(detail, message, request_id)
        outbox.write(
            protocol.encode({"type": "error", "requestId": request_id, "error": err.to_wire()})
        )
        _log.event("ipc_rejected", logging.WARNING, detail=detail, message=message)

    def broadcast(self, frame: dict[str, Any]) -> None:
        """Send ``frame`` to every connected caller."""
        data = protocol.encode(frame)
        for outbox in list(self.connections):
            outbox.write(data)

    async def close_all(self, timeout: float) -> None:
        """Flush every connection (bounded), so last frames reach their callers, then
        close them and let their coroutines end (none is left for the loop to cancel)."""
        # Concurrently: one slow reader must not use up the others' time.
        drains = {_aio.spawn(o.drain(timeout)) for o in self.connections}
        if drains:
            await asyncio.wait(drains, timeout=timeout + 0.1)
        for outbox in list(self.connections):
            if outbox.writer is not None:
                outbox.writer.close()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)
