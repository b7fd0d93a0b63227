"""One request relayed to a host, byte for byte, over a pooled keep-alive connection.

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
import ssl
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import httptools

from tether.fleet import http1

DEFAULT_CONNECT_TIMEOUT_S = 1.0
DEFAULT_FIRST_BYTE_TIMEOUT_S = 10.0
POOL_PER_HOST = 64
READ_SIZE = 256 * 1024


class Endpoint(NamedTuple):
    """Where a host's advertised URL says to connect, and whether over TLS."""

    host: str
    port: int
    tls: bool
    netloc: bytes  # what the request's Host header says

    @classmethod
    def of(cls, url: str) -> Endpoint:
        parts = urlsplit(url)
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        return cls(parts.hostname or "127.0.0.1", port, tls, parts.netloc.encode())


class HostRefused(Exception):
    """Nothing was sent: the host could not be reached."""


class HostUntrusted(HostRefused):
    """Nothing was sent: the TLS handshake with an ``https://`` host failed (its
    certificate is not one the router trusts, or it does not speak TLS)."""


class HostSilent(Exception):
    """The request was sent; no answer began in time."""


class ClientLink:
    """The client side of one connection, as the relay needs to know it: whether the
    client has gone (its read side ended), and the host connection to abort then, so a
    relayed stream nobody reads any more ends at once instead of at its next byte."""

    def __init__(self) -> None:
        self.gone = False
        self.upstream: asyncio.StreamWriter | None = None

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


class HostConnections:
    """Idle keep-alive connections to each host, reused across requests.

    A connection to an ``https://`` host (``tls=True``) is opened with ``tls_context``
    (:func:`tether.serve.tls.fleet_client_context`: the host's certificate verified and
    its name checked); the handshake is part of the connect timeout, so a host that
    accepts and then says nothing cannot hold a request.
    """

    def __init__(
        self,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.tls_context = tls_context
        self._idle: dict[tuple[str, int], deque[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
        self._idle = defaultdict(deque)

    async def get(
        self, host: str, port: int, *, tls: bool = False
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        idle = self._idle[(host, port)]
        while idle:
            reader, writer = idle.pop()
            if not writer.is_closing() and not reader.at_eof():
                return reader, writer
            writer.close()
        context = None
        if tls:
            if self.tls_context is None:  # the system's trust store, loaded once
                self.tls_context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
            context = self.tls_context
        try:
            async with asyncio.timeout(self.connect_timeout):
                return await asyncio.open_connection(host, port, limit=READ_SIZE, ssl=context)
        except ssl.SSLError as e:
            raise HostUntrusted(_tls_failure(host, port, e)) from e
        except (OSError, TimeoutError) as e:
            raise HostRefused(f"{host}:{port}: {str(e) or 'connect timed out'}") from e

    def put(
        self, host: str, port: int, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter]
    ) -> None:
        idle = self._idle[(host, port)]
        if len(idle) < POOL_PER_HOST and not conn[1].is_closing():
            idle.append(conn)
        else:
            conn[1].close()

    def forget(self, host: str, port: int) -> None:
        """Drop every idle connection to a host (it was found down)."""
        for _reader, writer in self._idle.pop((host, port), deque()):
            writer.close()

    async def aclose(self) -> None:
        writers = [w for idle in self._idle.values() for _r, w in idle]
        self._idle.clear()
        for writer in writers:
            writer.close()
        for writer in writers:
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()


def _tls_failure(host: str, port: int, e: ssl.SSLError) -> str:
    """What a failed handshake tells the client: the reason OpenSSL gave, and for an
    unverified certificate the flag that makes the router trust it."""
    reason = getattr(e, "verify_message", None) or e.reason or str(e)
    if isinstance(e, ssl.SSLCertVerificationError) and "mismatch" in str(reason).lower():
        return (
            f"{host}:{port}: TLS: the host's certificate does not name it ({reason});"
            " a host's certificate must name the host of the URL it advertises"
        )
    if isinstance(e, ssl.SSLCertVerificationError):
        return (
            f"{host}:{port}: TLS: the host's certificate is not trusted ({reason});"
            " a router trusts hosts' certificates signed by the CA given with --fleet-ca"
        )
    return f"{host}:{port}: TLS handshake failed ({reason}); does the host serve HTTPS?"


class _ResponseWatch:
    """httptools callbacks that turn a host's answer into what the client is sent.

    The head is written back as it came (status, headers in order); a body is passed on
    as it arrives -- re-framed chunk by chunk when chunked, and for an event stream only
    up to its last complete event, so that whatever happens to the host the client's
    stream is always well formed and a ``host_lost`` event can follow it.
    """

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.status = 0
        self.headers_done = False
        self.complete = False
        self.chunked = False
        self.sse = False
        self.last_seq: int | None = None
        self.keep_alive = False
        self.parser: httptools.HttpResponseParser | None = None
        self._head: list[bytes] = []
        self._pending = b""  # an event stream's incomplete last event

    def on_status(self, status: bytes) -> None:
        self._head.append(status)

    def on_header(self, name: bytes, value: bytes) -> None:
        low = name.lower()
        if low == b"transfer-encoding" and b"chunked" in value.lower():
            self.chunked = True
        elif low == b"content-type" and value.startswith(b"text/event-stream"):
            self.sse = True
        self._head += [name, b": ", value, b"\r\n"]

    def head_bytes(self, status: int) -> bytes:
        reason = self._head[0] if self._head else b""
        return b"HTTP/1.1 %d %s\r\n%s\r\n" % (status, reason, b"".join(self._head[1:]))

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        if self.sse:
            data = self._pending + body
            cut = data.rfind(b"\n\n") + 2
            self._pending = data[cut:] if cut >= 2 else data
            if cut < 2:
                return
            body = data[:cut]
            seq = http1.last_event_id(body)
            if seq is not None:
                self.last_seq = seq
        self.out.append(http1.chunk(body) if self.chunked else body)

    def on_message_complete(self) -> None:
        # Only here: once the message is over, httptools no longer answers it.
        self.keep_alive = self.parser is not None and self.parser.should_keep_alive()
        if self._pending:
            self.out.append(http1.chunk(self._pending) if self.chunked else self._pending)
            self._pending = b""
        if self.chunked:
            self.out.append(http1.LAST_CHUNK)
        self.complete = True


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
    reader, writer = await pool.get(host, port, tls=tls)
    link = link or ClientLink()
    link.upstream = writer
    try:
        outcome = await _exchange_on(
            pool,
            host,
            port,
            (reader, writer),
            head,
            body,
            client,
            first_byte_timeout,
            on_lost,
            still_up,
            hold_status,
        )
    except BaseException:
        writer.close()  # whatever state it is in, it cannot be reused
        raise
    finally:
        link.upstream = None
    if link.gone:
        writer.close()
    return outcome


async def _exchange_on(
    pool: HostConnections,
    host: str,
    port: int,
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    head: bytes,
    body: AsyncIterator[bytes],
    client: asyncio.StreamWriter,
    first_byte_timeout: float | None,
    on_lost: Callable[[int | None], Awaitable[dict[str, Any]]] | None,
    still_up: Callable[[], bool] | None = None,
    hold_status: int | None = None,
) -> Outcome:
    reader, writer = conn
    try:
        writer.write(head)
        async for part in body:
            writer.write(part)
            await writer.drain()
        await writer.drain()
    except OSError as e:
        writer.close()
        raise HostRefused(f"{host}:{port}: {e}") from e
    watch = _ResponseWatch()
    parser = httptools.HttpResponseParser(watch)
    watch.parser = parser
    first = True
    lost = False
    held: bytearray | None = None  # the answer so far, while it is being held
    while not watch.complete:
        try:
            if first and first_byte_timeout is not None:
                async with asyncio.timeout(first_byte_timeout):
                    data = await reader.read(READ_SIZE)
            else:
                data = await _next_bytes(reader, still_up)
        except TimeoutError:
            writer.close()
            raise HostSilent(f"{host}:{port}: no answer within {first_byte_timeout} s") from None
        except _HostGone:
            if first:
                writer.close()
                raise HostSilent(f"{host}:{port}: became unavailable before answering") from None
            data = b""
        except OSError:
            data = b""
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
        if client.transport.get_write_buffer_size() > READ_SIZE:
            await client.drain()
    whole = watch.complete and not lost
    if held is not None and not whole:
        client.write(bytes(held))  # cut short: relayed, as the host's failure would be
        held = None
    with contextlib.suppress(OSError, ConnectionError):
        await client.drain()
    status = parser.get_status_code() if watch.headers_done else 0
    reusable = watch.complete and not lost and watch.keep_alive
    if reusable:
        pool.put(host, port, (reader, writer))
    else:
        writer.close()
    if lost and watch.sse and on_lost is not None:
        extra = await on_lost(watch.last_seq)
        event = http1.sse_event("host_lost", {"lastSeq": watch.last_seq, **extra})
        client.write(http1.chunk(event) + http1.LAST_CHUNK if watch.chunked else event)
        whole = watch.chunked  # a chunked stream ended properly; anything else did not
        with contextlib.suppress(OSError, ConnectionError):
            await client.drain()
    kept = None if held is None else bytes(held)
    return Outcome(status, reusable, lost, whole, watch.last_seq, kept)
