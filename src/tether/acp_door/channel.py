"""The door for request/response transports: what ``/v1/acp/{serverId}`` needs over HTTP.

An :class:`AcpChannel` is one ACP server reached by HTTP (sandbox-agent 0.4.2's route
shape): one :class:`~tether.acp_door.door.AcpDoor`, fed by POSTs, whose output is split
in two:

* the answer to a POSTed *request* is that POST's response. Each request gets an id of
  the channel's own (``h-<n>``) on its way in and its client's id back on its way out, so
  two HTTP clients that both use id 1 never get each other's answers (sandbox-agent
  keys pending requests by the client's id across clients);
* everything else the door says -- ``session/update``, ``_tether/session/ended``, its
  requests to the client -- goes to the event stream (SSE). Each event's id is the
  journal cursor after it (:mod:`.event_ids`: with one session, the journal ``seq``),
  and the newest events are kept in a bounded ring. A stream that reconnects with
  ``Last-Event-ID`` resumes without a gap or a duplicate: from the ring when it still
  holds that id, else from the journal -- every entry of every session after the id's
  position, relayed as the door relays it live, up to what the channel has sent
  since, then live. What the journal cannot give back: *live-only* events (the door's
  requests to the client -- a permission question, a relayed ``fs/*`` or
  ``terminal/*`` -- and unsolicited errors) that left the ring before the stream came
  back. Their requests are not lost for the agent: the owner's timeout answers them.

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

from tether import _aio, _fastjson
from tether.acp_door.attach import entries_between
from tether.acp_door.door import AcpDoor, DoorOptions, Origin
from tether.acp_door.event_ids import Cursors, Position, parse_id
from tether.errors import ClosedResourceError, UsageError
from tether.jsonrpc import encode

__all__ = ["RING_EVENTS", "AcpChannel", "check_event_id", "open_http_server"]

RING_EVENTS = 1024  # events a reconnecting stream can resume from (sandbox-agent's ring)


class AcpChannel:
    """One ACP server over a request/response transport. See the module docstring."""

    def __init__(self, options: DoorOptions, *, ring: int = RING_EVENTS) -> None:
        self._door = AcpDoor(self._on_output, options)
        self._door.on_origin = self._on_origin
        self._input: asyncio.Queue[bytes] = asyncio.Queue()
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        # (event number, event id, frame): the newest events, for an exact resume
        self._ring: collections.deque[tuple[int, str, dict[str, Any]]] = collections.deque(
            maxlen=ring
        )
        self._next_event = 1
        self._cursors = Cursors()
        self._origin: Origin | None = None  # of the frame the door is about to write
        self._streams: set[asyncio.Event] = set()  # one per open stream: "more to read"
        self._task: asyncio.Task[None] | None = None
        self._ids = 0
        self.closed = False

    def start(self) -> None:
        """Start serving (on the running loop)."""
        if self._task is None:
            self._task = _aio.spawn(self._door.serve(self._input.get))

    @property
    def late_answers(self) -> int:
        """The client's answers that came after the door stopped waiting (dropped)."""
        return self._door.to_client.late_answers

    @property
    def last_event_id(self) -> str | None:
        return self._ring[-1][1] if self._ring else None

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

    def _on_origin(self, origin: Origin) -> None:
        self._origin = origin

    def _on_output(self, data: bytes) -> None:
        origin, self._origin = self._origin, None
        for line in data.splitlines():
            frame = _fastjson.loads(line.decode("utf-8"))
            rid = frame.get("id") if "method" not in frame else None
            waiter = self._waiting.pop(rid, None) if isinstance(rid, str) else None
            if waiter is not None:
                if not waiter.done():
                    waiter.set_result(frame)
                continue
            moved = origin is not None and self._cursors.advance(*origin)
            number = self._next_event
            self._ring.append((number, self._cursors.event_id(moved, number), frame))
            self._next_event += 1
            origin = None  # one frame per write: the origin was this frame's
        self._wake()

    def _wake(self) -> None:
        for more in self._streams:
            more.set()

    async def events(
        self,
        after: str | None = None,
        *,
        idle: float | None = None,
        from_start: bool = False,
    ) -> AsyncIterator[tuple[str, dict[str, Any]] | None]:
        """(event id, frame) after the event ``after`` (``Last-Event-ID``), else live --
        or, ``from_start``, from the oldest event the ring holds; ends when the channel
        closes. With ``idle``, None is yielded after that many seconds without an event
        (the caller's heartbeat).

        Raises:
            UsageError: ``after`` is not an event id of this form (checked before the
                first event: :func:`check_event_id` lets a caller check it first).
        """
        cursor = self._ring[0][0] if from_start and self._ring else self._next_event
        if after is not None:
            found = next((n for n, eid, _ in self._ring if eid == after), None)
            positions = check_event_id(after)
            if found is not None:
                cursor = found + 1
            elif self._ring and self._ring[0][0] == 1 and self._cursors.before_all(positions):
                cursor = 1  # from the start, and the ring holds it all: exact, live-only too
            else:
                async for item in self._replay(positions):
                    yield item
        more = asyncio.Event()
        self._streams.add(more)
        try:
            while True:
                more.clear()
                for number, event_id, frame in tuple(self._ring):
                    if number >= cursor:
                        cursor = number + 1
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

    async def _replay(self, positions: list[Position]) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """From the journal: what the channel relayed after ``positions``, up to now,
        with the ids it had (the ring's events from now on follow without a gap)."""
        plan = self._cursors.plan(positions)
        replay = Cursors(
            order=list(self._cursors.order),
            at=dict(self._cursors.at),
            first=dict(self._cursors.first),
        )
        for key, start, _end in plan:
            replay.at[key] = start
        for key, start, end in plan:
            # a part-delivered entry is read again (its other parts are still due)
            after = start[0] - 1 if start[1] else start[0]
            rows = await asyncio.to_thread(entries_between, key, after, end[0])
            for seq, entry in rows:
                notes = self._door.journal_notes(key, entry)
                for part, (method, params) in enumerate(notes, 1):
                    if (seq == start[0] and part <= start[1]) or (
                        seq == end[0] and 0 < end[1] < part
                    ):
                        continue  # delivered before the id; or after what the channel sent
                    replay.advance(key, seq, part, len(notes))
                    note = {"jsonrpc": "2.0", "method": method, "params": params}
                    yield replay.vector(), note

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


def check_event_id(text: str) -> list[Position]:
    """The positions of a ``Last-Event-ID``.

    Raises:
        UsageError: not an event id of this server's form.
    """
    try:
        return parse_id(text)
    except ValueError:
        raise UsageError(f"Last-Event-ID {text[:40]!r} is not an event id of this server") from None


def open_http_server(config: dict[str, Any], agent: str | None) -> AcpChannel:
    """A new ACP server for ``/v1/acp/{serverId}``: the ``agent`` named (else the config's
    default agent), with the owner settings the configuration makes for every door."""
    from tether import agents, operations, sessions

    label = agent or str(config.get("defaultAgent") or agents.DEFAULT_AGENT)
    argv = agents.resolve(label, config.get("agents"))
    named = agents.is_agent_name(label, config.get("agents"))
    options = DoorOptions(
        agent_label=label,
        agent_argv=argv,
        agent_scope=sessions.agent_scope(label, argv, named=named),
        # The gateway's config (of the directory it serves from), through the table
        # every door uses.
        owner_options=operations.settings(config),
    )
    return AcpChannel(options)
