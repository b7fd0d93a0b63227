"""A session's event stream from a remote Tether, resumed where it was cut.

``GET /v1/sessions/{id}/events`` (:mod:`tether.serve.events_api`) sends one SSE event
per journal entry, its ``id:`` the entry's ``seq``. :class:`EventStream` reads it and,
when the connection breaks (a reset, a proxy that gives up, the gateway restarting), or
the gateway lets a slow reader go (``lagged``), connects again with ``Last-Event-ID``
set to the last seq it delivered: the gateway resumes right after it, so the caller sees
every entry once, in order -- no gap, no duplicate (a seq at or below the last one
delivered is dropped, should a server ever resend one). The stream ends when the
session's end (``session_ended``) was delivered, or on ``204`` (a closed session with
nothing more to replay).

Reconnecting is bounded: :data:`RETRIES` attempts in a row that deliver nothing, with a
growing pause between them; then the transport's error is raised, as the tree's class.

:class:`SseParser` is the sans-IO part: lines in, events out.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from tether.errors import (
    BrokenResourceError,
    HostUnavailable,
    RemoteProtocolError,
    TetherError,
)

if TYPE_CHECKING:
    import httpx

__all__ = ["EventStream", "SseEvent", "SseParser"]

RETRIES: Final = 8  # reconnects in a row without progress before giving up
PAUSE_S: Final = (0.05, 2.0)  # first pause between reconnects, and the most it grows to
HEARTBEAT_S: Final = 10.0  # asked of the gateway, so a silent dead connection is noticed
READ_S: Final = 3 * HEARTBEAT_S  # no byte (not even a heartbeat) this long: reconnect


class SseEvent(NamedTuple):
    """One server-sent event: its name (``message`` by default), ``id`` and data."""

    event: str
    id: str | None
    data: str


class SseParser:
    """Server-Sent Events framing (the WHATWG rules we need): feed lines, get events.

    Comments (``: heartbeat``) and ``retry:`` are dropped; several ``data:`` lines join
    with newlines; an event without data is no event.
    """

    def __init__(self) -> None:
        self._event = ""
        self._id: str | None = None
        self._data: list[str] = []

    def feed(self, line: str) -> SseEvent | None:
        """One line (without its end); the event it completes, if any."""
        if not line:
            event, self._event = self._event or "message", ""
            ident, self._id = self._id, None
            data, self._data = self._data, []
            return SseEvent(event, ident, "\n".join(data)) if data else None
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            self._id = value
        return None


class EventStream:
    """The journal entries of session ``key`` from a remote Tether, as decoded dicts.

    Args:
        http: the backend's client (base URL and token set).
        cursor: the first seq wanted (``?from=``); None with ``tail`` None: live only.
        tail: start this many entries before the end.
        control: attach as a controller while open (``?control=1``).
        errors: the backend's one boundary (:class:`tether.client.remote.Boundary`):
            a context manager translating ``httpx`` errors, and ``problem(response)``.

    Use as an async context manager: :meth:`open` connects, iteration delivers.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        key: str,
        *,
        cursor: int | None = None,
        tail: int | None = None,
        control: bool = False,
        errors: Any,
    ) -> None:
        self._http = http
        self._key = key
        self._cursor = cursor
        self._tail = tail
        self._control = control
        self._errors = errors
        self.last: int | None = None  # the last seq delivered (resume after it)
        self.reconnects = 0
        self.durable_seq: int | None = None  # a fleet host's highest seq shipped off-host
        self._response: httpx.Response | None = None
        self._lines: AsyncIterator[str] | None = None
        self._parser = SseParser()
        self._ended = False

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    def resume_after(self, seq: int) -> None:
        """Entries up to ``seq`` are not wanted: a reconnect starts after it."""
        if self.last is None or seq > self.last:
            self.last = seq

    async def open(self) -> bool:
        """Connect (once the response's headers are in); False: nothing to stream (204).

        Raises:
            TetherError: the server's problem (NoSession, PermissionDenied...), or the
                transport's failure.
        """
        import httpx

        params: dict[str, str] = {"heartbeat": str(HEARTBEAT_S)}
        headers: dict[str, str] = {}
        if self.last is not None:
            headers["Last-Event-ID"] = str(self.last)
        elif self._cursor is not None:
            params["from"] = str(self._cursor)
        elif self._tail is not None:
            params["tail"] = str(self._tail)
        if self._control:
            params["control"] = "1"
        timeout = httpx.Timeout(30.0, read=READ_S)
        request = self._http.build_request(
            "GET",
            f"/v1/sessions/{self._key}/events",
            params=params,
            headers=headers,
            timeout=timeout,
        )
        with self._errors():
            response = await self._http.send(request, stream=True)
        if response.status_code == 204:
            await response.aclose()
            self._ended = True
            return False
        if response.status_code >= 400:
            try:
                with self._errors():
                    await response.aread()
            finally:
                await response.aclose()
            raise self._errors.problem(response)
        self._response = response
        self._lines = response.aiter_lines()
        self._parser = SseParser()
        return True

    async def aclose(self) -> None:
        response, self._response, self._lines = self._response, None, None
        if response is not None:
            await response.aclose()

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        import httpx

        failures = 0
        while not self._ended:
            if self._lines is None:
                try:
                    if not await self.open():
                        break
                except TetherError as exc:
                    failures += 1
                    if failures > RETRIES or not exc.retryable:
                        raise
                    await self._pause(failures)
                    continue
            try:
                entry = await self._next_entry()
            except (httpx.TransportError, httpx.StreamError):
                entry = None  # cut: reconnect after the last seq delivered
            if entry is not None:
                return entry
            await self.aclose()
            failures += 1
            self.reconnects += 1
            if failures > RETRIES:
                raise BrokenResourceError(
                    "the event stream kept breaking", session_key=self._key, last_seq=self.last
                )
            await self._pause(failures)
        raise StopAsyncIteration

    async def _next_entry(self) -> dict[str, Any] | None:
        """The next new entry of this connection; None: it ended or asks a reconnect."""
        assert self._lines is not None
        async for line in self._lines:
            event = self._parser.feed(line)
            if event is None:
                continue
            if event.event == "durable":
                # A fleet host's highest seq shipped off-host (no id: not an entry).
                self._durable(event.data)
                continue
            if event.event == "host_lost":
                # Through a router: the session's host went away mid-stream. What it
                # shipped is readable from the router; nothing more comes on this one.
                raise self._host_lost(event.data)
            if event.event in ("lagged", "error"):
                # We fell behind the gateway's ring, or its follower failed: the journal
                # has everything; resume from our seq.
                return None
            if event.event != "message":
                continue  # an event this client does not know: not an entry
            try:
                entry = json.loads(event.data)
            except ValueError:
                raise RemoteProtocolError("the event stream sent malformed JSON") from None
            seq = entry.get("seq") if isinstance(entry, dict) else None
            if not isinstance(seq, int):
                continue
            if self.last is not None and seq <= self.last:
                continue  # already delivered
            self.last = seq
            if entry.get("kind") == "session_ended":
                self._ended = True
            return dict(entry)
        return None  # the server ended this response: reconnect (or 204: the end)

    def _durable(self, data: str) -> None:
        try:
            seq = json.loads(data).get("durableSeq")
        except (ValueError, AttributeError):
            raise RemoteProtocolError("the event stream sent a malformed durable event") from None
        if isinstance(seq, int) and (self.durable_seq is None or seq > self.durable_seq):
            self.durable_seq = seq

    def _host_lost(self, data: str) -> HostUnavailable:
        try:
            doc = json.loads(data)
        except ValueError:
            doc = {}
        fields = doc if isinstance(doc, dict) else {}
        self._ended = True
        return HostUnavailable(
            "the session's host was lost while streaming; what it shipped is readable"
            " (history, export) and the stream can be opened again once it is back",
            detail_code="HOST_LOST",
            session_key=self._key,
            host_id=fields.get("hostId"),
            last_seq=fields.get("lastSeq"),
            durable_seq=fields.get("durableSeq"),
        )

    async def _pause(self, failures: int) -> None:
        first, most = PAUSE_S
        await asyncio.sleep(min(most, first * 2 ** (failures - 1)))
