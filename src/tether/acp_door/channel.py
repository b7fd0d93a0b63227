"""The door for request/response transports: what ``/v1/acp/{serverId}`` needs over HTTP.

An :class:`AcpChannel` is one ACP server reached by HTTP (sandbox-agent 0.4.2's route
shape): one :class:`~tether.acp_door.door.AcpDoor`, fed by POSTs, whose output is split
in two:

* the answer to a POSTed *request* is that POST's response. Each request gets an id of
  the channel's own (``h-<n>``) on its way in and its client's id back on its way out, so
  two HTTP clients that both use id 1 never get each other's answers (sandbox-agent
  keys pending requests by the client's id across clients);
* everything else the door says -- ``session/update``, ``_tether/session/ended`` -- goes
  to the event stream (SSE), each event with an id from the channel's counter, kept in
  a bounded ring so a stream that reconnects with ``Last-Event-ID`` resumes without a
  gap or a duplicate as long as the ring holds it (older history: ``session/load``
  replays it from the journal).

A POST whose HTTP client goes away before the answer is *abandoned*, never left
running for nobody: a ``session/prompt`` gets its ``session/cancel`` (sandbox-agent
sends none). There is no flat request timeout: a prompt runs as long as its turn.
:meth:`AcpChannel.aclose` (HTTP ``DELETE``) is idempotent: the door sees EOF, its
running turns are cancelled, its sessions stay warm (or close, with ``close_on_exit``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from tether import _fastjson
from tether.acp_door.door import AcpDoor, DoorOptions
from tether.errors import ClosedResourceError
from tether.jsonrpc import encode

__all__ = ["RING_EVENTS", "AcpChannel"]

RING_EVENTS = 1024  # events a reconnecting stream can resume from (sandbox-agent's ring)


class AcpChannel:
    """One ACP server over a request/response transport. See the module docstring."""

    def __init__(self, options: DoorOptions, *, ring: int = RING_EVENTS) -> None:
        self._door = AcpDoor(self._on_output, options)
        self._input: asyncio.Queue[bytes] = asyncio.Queue()
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ring: collections.deque[tuple[int, dict[str, Any]]] = collections.deque(maxlen=ring)
        self._next_event = 1
        self._streams: set[asyncio.Event] = set()  # one per open stream: "more to read"
        self._task: asyncio.Task[None] | None = None
        self._ids = 0
        self.closed = False

    def start(self) -> None:
        """Start serving (on the running loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._door.serve(self._input.get))

    @property
    def last_event_id(self) -> int:
        return self._next_event - 1

    async def post(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """Hand one JSON-RPC message to the door; a request's answer, else None (202).

        Raises:
            ClosedResourceError: the channel was closed.

        Cancellation: the request is abandoned; an abandoned ``session/prompt`` gets
        ``session/cancel`` for its session.
        """
        if self.closed:
            raise ClosedResourceError("this ACP server was closed")
        self.start()
        if "method" not in message or "id" not in message:
            self._input.put_nowait(encode(message))  # a notification, or a client's answer
            return None
        self._ids += 1
        internal = f"h-{self._ids}"
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[internal] = answer
        self._input.put_nowait(encode({**message, "id": internal}))
        try:
            assert self._task is not None
            both: set[asyncio.Future[Any]] = {answer, self._task}
            await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
            if not answer.done():  # the door ended (closed meanwhile): no answer will come
                raise ClosedResourceError("this ACP server was closed")
            frame = answer.result()
        except asyncio.CancelledError:
            self._waiting.pop(internal, None)
            params = message.get("params")
            if message.get("method") == "session/prompt" and isinstance(params, dict):
                cancel = {"sessionId": params.get("sessionId")}
                note = {"jsonrpc": "2.0", "method": "session/cancel", "params": cancel}
                self._input.put_nowait(encode(note))
            raise
        return {**frame, "id": message["id"]}

    def _on_output(self, data: bytes) -> None:
        for line in data.splitlines():
            frame = _fastjson.loads(line.decode("utf-8"))
            rid = frame.get("id") if "method" not in frame else None
            waiter = self._waiting.pop(rid, None) if isinstance(rid, str) else None
            if waiter is not None:
                if not waiter.done():
                    waiter.set_result(frame)
                continue
            self._ring.append((self._next_event, frame))
            self._next_event += 1
        self._wake()

    def _wake(self) -> None:
        for more in self._streams:
            more.set()

    async def events(
        self, after: int | None = None, *, idle: float | None = None
    ) -> AsyncIterator[tuple[int, dict[str, Any]] | None]:
        """(event id, frame) from after ``after`` (``Last-Event-ID``), else live; ends
        when the channel closes. Events the ring no longer holds are skipped: the first
        id given then shows the gap. With ``idle``, None is yielded after that many
        seconds without an event (the caller's heartbeat)."""
        cursor = self._next_event if after is None else after + 1
        more = asyncio.Event()
        self._streams.add(more)
        try:
            while True:
                more.clear()
                for event_id, frame in tuple(self._ring):
                    if event_id >= cursor:
                        cursor = event_id + 1
                        yield event_id, frame
                if self.closed:
                    return
                if cursor >= self._next_event:
                    try:
                        async with asyncio.timeout(idle):
                            await more.wait()
                    except TimeoutError:
                        yield None
        finally:
            self._streams.discard(more)

    async def aclose(self) -> None:
        """Close (idempotent): EOF to the door, pending posts fail, streams end."""
        if self.closed:
            return
        self.closed = True
        self._input.put_nowait(b"")
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(ClosedResourceError("this ACP server was closed"))
        self._waiting.clear()
        self._wake()
