"""One request relayed to a host, byte for byte, over a pooled keep-alive connection
(the pool, and where and how a host is reached: :mod:`tether.fleet.relay_pool`).

The router never builds a response object for what a host answers: it writes the
host's bytes to its client as they arrive, parsing alongside only to know where the
answer ends (``httptools``, the serve extra's C parser). That is what keeps a routed
prompt within a fraction of a millisecond of a direct one, where a generic HTTP client
per request cost milliseconds.

What the client is told when the host fails:

- the connection is refused or does not open within ``connect_timeout``: nothing was
  sent, the host is down -> ``503 HOST_UNAVAILABLE``, retryable;
- the request was sent and no first byte came back within ``first_byte_timeout`` (a
  frozen host) -> ``504 HOST_TIMEOUT``; whether the host acted on it is unknown, so it is
  retryable only for reads (GET). A request whose answer legitimately takes long (an
  ACP ``session/prompt`` over HTTP answers when its turn ends) is sent with no flat
  timeout: its host is asked after every silent second whether it still lives (as an
  open answer's is), and the ``504`` comes once the host is known unavailable;
- the host went away in the middle of an answer: a relayed SSE stream gets
  ``event: host_lost`` with the last seq relayed (and what the caller adds, such as
  ``durableSeq``) and ends; any other answer is cut (the connection closes), as the
  host's own death would have cut it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httptools

from tether.fleet import http1
from tether.fleet.relay_pool import (
    DEFAULT_CONNECT_TIMEOUT_S,
    READ_SIZE,
    Endpoint,
    HostConnections,
    HostRefused,
    HostSilent,
    HostUntrusted,
)
from tether.fleet.relay_watch import ResponseWatch

DEFAULT_FIRST_BYTE_TIMEOUT_S = 10.0
REPLAY_MAX = 1024 * 1024  # a request body up to this size can be sent once more


class ClientLink:
    """The client side of one connection, as the relay needs to know it: whether the
    client has gone (its read side ended), and the host connection to abort then, so a
    relayed stream nobody reads any more ends at once instead of at its next byte."""

    def __init__(self) -> None:
        self.gone = False
        self.upstream: asyncio.StreamWriter | None = None
        # Whether any of the current request's answer was written to the client: a
        # failure after that can only cut the connection (requests.serve_connection).
        self.began = False

    def client_gone(self) -> None:
        self.gone = True
        if self.upstream is not None:
            self.upstream.transport.abort()


@dataclass(slots=True)
class Outcome:
    status: int
    reusable: bool  # the host connection may serve another request
    lost_midway: bool  # the host went away in the middle of its answer
    client_whole: bool  # the client got a well-formed, ended answer (host_lost included)
    last_seq: int | None  # the last SSE id relayed, for a stream
    # The answer, whole, when its status was the one the caller asked to hold (nothing
    # of it was written to the client: the caller decides what the client is told).
    held: bytes | None = None


STILL_UP_EVERY_S = 1.0  # while an answer is open and silent, ask this often if its host lives
HOLD_MAX = 64 * 1024  # a held answer larger than this is relayed after all


class _HostGone(Exception):
    """The host of an open answer is known unavailable (a frozen host sends no EOF)."""


async def _next_bytes(reader: asyncio.StreamReader, still_up: Callable[[], bool] | None) -> bytes:
    """The next bytes of an answer that has begun. A frozen or partitioned host never
    closes the connection, so while nothing comes we ask ``still_up`` every
    :data:`STILL_UP_EVERY_S` (the router's view: heartbeats, refusals) and give the
    answer up once its host is known unavailable."""
    if still_up is None:
        return await reader.read(READ_SIZE)
    while True:
        try:
            async with asyncio.timeout(STILL_UP_EVERY_S):
                return await reader.read(READ_SIZE)
        except TimeoutError:
            if not still_up():
                raise _HostGone() from None


async def exchange(
    pool: HostConnections,
    host: str,
    port: int,
    head: bytes,
    body: AsyncIterator[bytes],
    client: asyncio.StreamWriter,
    *,
    first_byte_timeout: float | None = DEFAULT_FIRST_BYTE_TIMEOUT_S,
    on_lost: Callable[[int | None], Awaitable[dict[str, Any]]] | None = None,
    link: ClientLink | None = None,
    still_up: Callable[[], bool] | None = None,
    tls: bool = False,
    hold_status: int | None = None,
) -> Outcome:
    """Send one request to ``host:port`` (over TLS when ``tls``) and relay its answer
    to ``client``.

    Raises :class:`HostRefused` (nothing sent; :class:`HostUntrusted` for a failed TLS
    handshake) or :class:`HostSilent` (sent, no answer began in time); the caller
    answers the client for those. Anything else that goes wrong is told to the client
    as the host's own failure would be.

    ``first_byte_timeout`` None: no flat timeout (``still_up`` decides, see the module
    docstring). An answer of status ``hold_status`` (not an event stream, at most
    :data:`HOLD_MAX` bytes) is returned in :attr:`Outcome.held` instead of relayed.
    """
    link = link or ClientLink()
    req = _Request(pool, host, port, head, client, link, first_byte_timeout, on_lost,
                   still_up, hold_status)  # fmt: skip
    conn = pool.take_idle(host, port)
    # A request sent down a kept-alive connection may meet the host closing it (its
    # keep-alive timeout, a drain) as it goes out: the connection ends before any
    # answer begins, and the host never read the request. It is sent once more on a
    # fresh connection -- whose failure is then the host's -- so its body is kept
    # while it is sent (up to REPLAY_MAX; a longer one is not sent again).
    replay = _Replayable(body) if conn is not None else None
    if conn is None:
        conn = await pool.open(host, port, tls=tls)
    try:
        return await _attempt(req, conn, replay or body)
    except HostRefused:
        if replay is None or not replay.whole:
            raise
    # The fresh connection proves the host's process lives, and a live host does not
    # drop a request it read without answering it: nothing was acted on.
    return await _attempt(req, await pool.open(host, port, tls=tls), replay)


@dataclass(frozen=True, slots=True)
class _Request:
    """What stays the same across the attempts of one :func:`exchange`."""

    pool: HostConnections
    host: str
    port: int
    head: bytes
    client: asyncio.StreamWriter
    link: ClientLink
    first_byte_timeout: float | None
    on_lost: Callable[[int | None], Awaitable[dict[str, Any]]] | None
    still_up: Callable[[], bool] | None
    hold_status: int | None


async def _attempt(
    req: _Request,
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    body: AsyncIterator[bytes] | _Replayable,
) -> Outcome:
    """One attempt of :func:`exchange`, over ``conn``."""
    writer, link = conn[1], req.link
    link.upstream = writer
    try:
        outcome = await _exchange_on(req, conn, body.__aiter__())
    except BaseException:
        writer.close()  # whatever state it is in, it cannot be reused
        raise
    finally:
        link.upstream = None
    if link.gone:
        writer.close()
    return outcome


class _Replayable:
    """A request body sent as it arrives and kept meanwhile, so that it can be sent
    again: each iteration yields what was kept, then goes on with what is still to
    come. ``whole`` turns False once it outgrew :data:`REPLAY_MAX` (and is not kept)."""

    def __init__(self, parts: AsyncIterator[bytes]) -> None:
        self._parts = parts
        self._kept: list[bytes] = []
        self._size = 0
        self.whole = True

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for part in list(self._kept):
            yield part
        async for part in self._parts:
            if self.whole:
                self._size += len(part)
                self._kept.append(part)
                if self._size > REPLAY_MAX:
                    self.whole = False
                    self._kept.clear()
            yield part


async def _exchange_on(
    req: _Request,
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    body: AsyncIterator[bytes],
) -> Outcome:
    host, port, client = req.host, req.port, req.client
    writer = conn[1]
    await _send(writer, req.head, body, host, port)
    watch = ResponseWatch(head_only=req.head.startswith(b"HEAD "))
    parser = httptools.HttpResponseParser(watch)
    watch.parser = parser
    first = True
    lost = False
    held: bytearray | None = None  # the answer so far, while it is being held
    while not watch.complete:
        data = await _read_some(conn, host, port, first, req.first_byte_timeout, req.still_up)
        if not data:
            if first:
                writer.close()
                raise HostRefused(f"{host}:{port}: closed the connection without answering")
            lost = True
            with contextlib.suppress(httptools.HttpParserError):
                parser.feed_data(b"")  # a close-delimited body ends here
            break
        first = False
        was_done = watch.headers_done
        try:
            parser.feed_data(data)
        except httptools.HttpParserError:
            lost = True
            break
        held = _pass_on(watch, parser, client, held, req.hold_status, was_done)
        req.link.began |= watch.headers_done and held is None
        if client.transport.get_write_buffer_size() > READ_SIZE:
            await client.drain()
    return await _finish(req, conn, watch, parser, lost, held)


async def _send(
    writer: asyncio.StreamWriter, head: bytes, body: AsyncIterator[bytes], host: str, port: int
) -> None:
    """The request, head and body, written to the host (refused if it cannot be)."""
    try:
        writer.write(head)
        async for part in body:
            writer.write(part)
            await writer.drain()
        await writer.drain()
    except OSError as e:
        writer.close()
        raise HostRefused(f"{host}:{port}: {e}") from e


async def _read_some(
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    host: str,
    port: int,
    first: bool,
    first_byte_timeout: float | None,
    still_up: Callable[[], bool] | None,
) -> bytes:
    """The next bytes of the host's answer; ``b""`` once the host connection ended (or
    its host is known gone after the answer began). No first byte in time, or a host
    gone before it answered, is :class:`HostSilent`."""
    reader, writer = conn
    try:
        if first and first_byte_timeout is not None:
            async with asyncio.timeout(first_byte_timeout):
                return await reader.read(READ_SIZE)
        return await _next_bytes(reader, still_up)
    except TimeoutError:
        writer.close()
        raise HostSilent(f"{host}:{port}: no answer within {first_byte_timeout} s") from None
    except _HostGone:
        if first:
            writer.close()
            raise HostSilent(f"{host}:{port}: became unavailable before answering") from None
        return b""
    except OSError:
        return b""


def _pass_on(
    watch: ResponseWatch,
    parser: httptools.HttpResponseParser,
    client: asyncio.StreamWriter,
    held: bytearray | None,
    hold_status: int | None,
    was_done: bool,
) -> bytearray | None:
    """What was parsed, written to the client -- or added to the held answer, when its
    status is ``hold_status`` (until it grows past :data:`HOLD_MAX`); returns the held
    answer so far."""
    if watch.headers_done and not was_done:
        status = parser.get_status_code()
        if status == hold_status and not watch.sse:
            held = bytearray(watch.head_bytes(status))
        else:
            client.write(watch.head_bytes(status))
    if watch.out:
        if held is None:
            client.write(b"".join(watch.out))
        else:
            held.extend(b"".join(watch.out))
        watch.out.clear()
    if held is not None and len(held) > HOLD_MAX:
        client.write(bytes(held))  # too large to hold: relayed after all
        held = None
    return held


async def _finish(
    req: _Request,
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    watch: ResponseWatch,
    parser: httptools.HttpResponseParser,
    lost: bool,
    held: bytearray | None,
) -> Outcome:
    """The answer over: the host connection pooled again (or closed), a cut event
    stream ended with ``host_lost``, and what happened said."""
    client, on_lost = req.client, req.on_lost
    whole = watch.complete and not lost
    if held is not None and not whole:
        req.link.began = True
        client.write(bytes(held))  # cut short: relayed, as the host's failure would be
        held = None
    with contextlib.suppress(OSError, ConnectionError):
        await client.drain()
    status = parser.get_status_code() if watch.headers_done else 0
    reusable = watch.complete and not lost and watch.keep_alive and not watch.trailing
    if reusable:
        req.pool.put(req.host, req.port, conn)
    else:
        conn[1].close()
    if lost and watch.sse and on_lost is not None:
        extra = await on_lost(watch.last_seq)
        event = http1.sse_event("host_lost", {"lastSeq": watch.last_seq, **extra})
        req.link.began = True
        client.write(http1.chunk(event) + http1.LAST_CHUNK if watch.chunked else event)
        whole = watch.chunked  # a chunked stream ended properly; anything else did not
        with contextlib.suppress(OSError, ConnectionError):
            await client.drain()
    kept = None if held is None else bytes(held)
    return Outcome(status, reusable, lost, whole, watch.last_seq, kept)


__all__ = (
    "DEFAULT_CONNECT_TIMEOUT_S",
    "ClientLink",
    "Endpoint",
    "HostConnections",
    "HostRefused",
    "HostSilent",
    "HostUntrusted",
    "Outcome",
    "exchange",
)
