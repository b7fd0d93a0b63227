"""Serving HTTP/1.1 requests on raw asyncio streams, for the router and a host's agents'
door (:mod:`tether.fleet.door`): both relay what they are asked, byte for byte, and
never build a request object.

A connection's bytes are parsed by ``httptools`` into heads and body parts on a queue;
:func:`serve_connection` hands each head, with its body still arriving, to the caller's
``serve_one``, which answers it (or relays it) and says whether the connection serves
on. :func:`serve_listener` serves a bound listening socket until told to stop, then ends
every open connection, relayed streams included.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import httptools

from tether import _aio, _log
from tether.fleet import http1
from tether.fleet.relay import ClientLink

# A request head larger than this is refused (431), counted at each read of the
# connection: at the latest once it passed HEAD_MAX + READ_SIZE.
HEAD_MAX = 64 * 1024
# How long a connection may wait for its next request's whole head: an idle kept-alive
# connection is closed then, and one whose head has begun is answered 408 -- each
# connection holds a task and a socket, and a client that never finishes (or never
# starts) must not hold them for ever. HTTP clients let their idle connections go sooner.
WAIT_FOR_HEAD_S = 60.0
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
READ_SIZE = 256 * 1024
QUEUED_MAX = 8  # body parts (each at most READ_SIZE) read ahead of their reader


class RequestQueue(asyncio.Queue[tuple[str, Any]]):
    """A connection's parsed requests (heads, body parts, their ends), in order; ``room``
    is set while it holds no more than :data:`QUEUED_MAX` items (the reading of the
    client's bytes waits for it)."""

    def __init__(self) -> None:
        super().__init__()
        self.room = asyncio.Event()
        self.room.set()

    def _get(self) -> tuple[str, Any]:
        item = super()._get()
        if self.qsize() <= QUEUED_MAX:
            self.room.set()
        return item


Queue = RequestQueue
# serve_one(head, queue of its body, client, link) -> whether the connection serves on
ServeOne = Callable[[http1.RequestHead, Queue, asyncio.StreamWriter, ClientLink], Awaitable[bool]]


class HeadTooLarge(Exception):
    """A request head grew past :data:`HEAD_MAX` (answered ``431``, connection closed)."""


class RequestWatch:
    """httptools callbacks for a client's requests: heads, then body parts."""

    def __init__(self, queue: Queue) -> None:
        self._queue = queue
        self._url = b""
        self._headers: list[http1.Header] = []
        # Bytes of the head so far: bounded before anyone is asked. httptools keeps a
        # header's text to itself until the header ends, so the bytes fed while a head
        # is being read are counted too (grow(), by the reader of the connection).
        self._head_size = 0
        self.reading_head = False
        self.parser: httptools.HttpRequestParser | None = None

    def grow(self, n: int) -> None:
        self._head_size += n
        if self._head_size > HEAD_MAX:
            raise HeadTooLarge(f"a request head over {HEAD_MAX} bytes")

    def on_message_begin(self) -> None:
        self.reading_head = True
        self._head_size = 0

    def on_url(self, url: bytes) -> None:
        self.grow(len(url))
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.grow(len(name) + len(value) + 4)
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        assert self.parser is not None
        head = http1.RequestHead(
            method=self.parser.get_method(),
            target=self._url,
            headers=self._headers,
            keep_alive=self.parser.should_keep_alive(),
        )
        self._queue.put_nowait(("head", head))
        self._url, self._headers, self.reading_head = b"", [], False

    def on_body(self, body: bytes) -> None:
        self._queue.put_nowait(("body", body))

    def on_message_complete(self) -> None:
        self._queue.put_nowait(("end", None))


async def once(parts: Iterable[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


class RequestBody:
    """One request's body parts as they arrive; drained whole whatever its reader did,
    so the next request on the connection starts at its head."""

    def __init__(self, queue: Queue) -> None:
        self._queue = queue
        self.done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while not self.done:
            kind, part = await self._queue.get()
            if kind == "body":
                yield part
            elif kind == "end":
                self.done = True
            else:
                raise ConnectionError("the client went away mid-request")

    async def drain(self) -> None:
        async for _ in self:
            pass

    async def relayed(self, head: http1.RequestHead) -> AsyncIterator[bytes]:
        """The body as a host is sent it: as it came, and re-framed in chunks when it
        came chunked -- httptools hands over a chunked body's content, and the head sent
        on still says ``transfer-encoding: chunked`` (the host read the content as chunk
        sizes: a 400, or worse, a request out of step)."""
        if not head.chunked:
            async for part in self:
                yield part
            return
        async for part in self:
            if part:
                yield http1.chunk(part)
        yield http1.LAST_CHUNK


async def _feed(
    reader: asyncio.StreamReader,
    watch: RequestWatch,
    queue: Queue,
    link: ClientLink,
) -> None:
    assert watch.parser is not None
    try:
        while data := await reader.read(READ_SIZE):
            in_head = watch.reading_head
            watch.parser.feed_data(data)
            if in_head and watch.reading_head:
                watch.grow(len(data))  # all of it went to a head not ended yet
            # Whoever reads the body (a host, through the relay) is behind: read no more
            # of it until they catch up, so a client sending faster than a host reads
            # is held back by TCP rather than buffered here without end.
            while queue.qsize() > QUEUED_MAX:
                queue.room.clear()
                await queue.room.wait()
    except HeadTooLarge:
        queue.put_nowait(("too_large", None))
    except httptools.HttpParserCallbackError as e:  # raised in a callback of ours
        too_large = isinstance(e.__context__, HeadTooLarge)
        queue.put_nowait(("too_large" if too_large else "eof", None))
    except (httptools.HttpParserError, OSError, ConnectionError):
        pass
    queue.put_nowait(("eof", None))
    link.client_gone()


async def serve_connection(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    serve_one: ServeOne,
    on_request: Callable[[], None] = lambda: None,
) -> None:
    """Serve one client connection's requests in turn until it ends or may not go on."""
    queue = RequestQueue()
    watch = RequestWatch(queue)
    parser = httptools.HttpRequestParser(watch)
    watch.parser = parser
    link = ClientLink()
    feeder = _aio.spawn(_feed(reader, watch, queue, link))
    try:
        while True:
            try:
                async with asyncio.timeout(WAIT_FOR_HEAD_S):
                    kind, head = await queue.get()
            except TimeoutError:
                if watch.reading_head:  # begun, never ended: a slow or stuck client
                    writer.write(http1.problem(408, "Request Timeout",
                                               f"no whole request head in {WAIT_FOR_HEAD_S:g} s",
                                               code="HEAD_TIMEOUT", retryable=True,
                                               keep_alive=False))  # fmt: skip
                break  # idle that long: the connection is let go
            if kind == "too_large":
                writer.write(http1.problem(431, "Request Header Fields Too Large",
                                           f"a request head over {HEAD_MAX} bytes",
                                           code="HEAD_TOO_LARGE", retryable=False,
                                           keep_alive=False))  # fmt: skip
                break
            if kind != "head":
                break  # eof or a malformed request
            on_request()
            link.began = False
            if (head.header(b"expect") or b"").lower() == b"100-continue":
                # Every body is read (relayed, or drained): the client need not wait for
                # leave to send it (curl waits one second). Not passed on (HOP_BY_HOP).
                writer.write(CONTINUE)
            try:
                keep = await serve_one(head, queue, writer, link)
            except (OSError, ConnectionError):
                break  # the client's connection failed: nobody to answer
            except Exception as e:
                _answer_failure(head, writer, link, e)
                break
            if not keep or not head.keep_alive:
                break
    finally:
        feeder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feeder
        writer.close()
        with contextlib.suppress(OSError, ConnectionError, asyncio.CancelledError):
            await writer.wait_closed()


def _answer_failure(
    head: http1.RequestHead, writer: asyncio.StreamWriter, link: ClientLink, e: Exception
) -> None:
    """A request whose serving failed unexpectedly still gets its one answer -- ``500``,
    unless part of an answer was already written (then the connection is cut, as the
    caller's own failure would cut it) -- and the failure is logged, never lost."""
    what = f"{head.method.decode()} {head.path}"
    _log.logger.error("serving %s failed", what, exc_info=e)
    if not link.began:
        detail = f"serving {what} failed: {type(e).__name__}: {e}"
        answer = http1.problem(
            500, "Internal Server Error", detail,
            code="INTERNAL_ERROR", retryable=False, keep_alive=False,
        )  # fmt: skip
        writer.write(answer)


async def serve_listener(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    sock: Any,
    stop: asyncio.Event,
    *,
    tls: ssl.SSLContext | None = None,
) -> None:
    """Serve ``handle`` on an already bound listening socket (TCP or Unix; HTTPS with
    ``tls``) until ``stop`` is set; then end every open connection and wait (bounded)
    for their handlers."""
    handlers: set[asyncio.Task[None]] = set()

    async def each(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            await handle(reader, writer)
        except asyncio.CancelledError:
            # Only our own shutdown cancels a connection's task; asyncio's server would
            # log the cancellation of its callback's task as an error.
            writer.close()
        finally:
            handlers.discard(task)

    if sock.family == socket.AF_UNIX:
        server = await asyncio.start_unix_server(each, sock=sock, limit=HEAD_MAX)
    else:
        server = await asyncio.start_server(each, sock=sock, limit=HEAD_MAX, ssl=tls)
    try:
        await stop.wait()
    finally:
        server.close()
        for task in list(handlers):
            task.cancel()
        if handlers:
            await asyncio.wait(list(handlers), timeout=5)
        await server.wait_closed()
